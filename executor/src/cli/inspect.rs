//! `ari inspect`: what a component imports and exports.

use std::path::PathBuf;

use ari_runtime::wasmtime::component::types::{ComponentItem, Type};
use clap::Args;

use ari_runtime::{Runtime, RuntimeConfig};

/// Show a component's imports and exports, and whether it is a valid ari agent.
#[derive(Args)]
pub struct InspectArgs {
    /// The component (.wasm).
    component: PathBuf,
}

pub fn inspect(args: InspectArgs, config: RuntimeConfig) -> anyhow::Result<u8> {
    let bytes = super::read_module(&args.component)?;
    let runtime = Runtime::new(config)?;
    println!(
        "module sha256: {}",
        ari_runtime::attestation::sha256_hex(&bytes)
    );
    let (component, verdict) = match runtime.load(&bytes) {
        Ok(agent) => (agent.component().clone(), "valid ari agent".to_string()),
        Err(err) => {
            match ari_runtime::wasmtime::component::Component::new(runtime.engine(), &bytes) {
                Ok(c) => (c, err.to_string()),
                Err(_) => {
                    println!("agent: {err}");
                    return Ok(ari_runtime::FailureKind::InvalidModule.exit_code());
                }
            }
        }
    };
    println!("agent: {verdict}");
    let engine = runtime.engine();
    let ty = component.component_type();
    println!("imports:");
    for (name, ext) in ty.imports(engine) {
        print_item(engine, name, &ext.ty, 1);
    }
    println!("exports:");
    for (name, ext) in ty.exports(engine) {
        print_item(engine, name, &ext.ty, 1);
    }
    Ok(0)
}

fn print_item(
    engine: &ari_runtime::wasmtime::Engine,
    name: &str,
    item: &ComponentItem,
    depth: usize,
) {
    let pad = "  ".repeat(depth);
    match item {
        ComponentItem::ComponentInstance(inst) => {
            println!("{pad}instance {name}");
            for (n, ext) in inst.exports(engine) {
                print_item(engine, n, &ext.ty, depth + 1);
            }
        }
        ComponentItem::ComponentFunc(f) => {
            let params: Vec<String> = f
                .params()
                .map(|(n, t)| format!("{n}: {}", type_name(&t)))
                .collect();
            let results: Vec<String> = f.results().map(|t| type_name(&t)).collect();
            let arrow = if results.is_empty() {
                String::new()
            } else {
                format!(" -> {}", results.join(", "))
            };
            println!("{pad}func {name}({}){arrow}", params.join(", "));
        }
        ComponentItem::Resource(_) => println!("{pad}resource {name}"),
        ComponentItem::Type(_) => println!("{pad}type {name}"),
        ComponentItem::CoreFunc(_) => println!("{pad}core func {name}"),
        ComponentItem::Module(_) => println!("{pad}core module {name}"),
        ComponentItem::Component(_) => println!("{pad}component {name}"),
    }
}

fn type_name(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::S8 => "s8".into(),
        Type::U8 => "u8".into(),
        Type::S16 => "s16".into(),
        Type::U16 => "u16".into(),
        Type::S32 => "s32".into(),
        Type::U32 => "u32".into(),
        Type::S64 => "s64".into(),
        Type::U64 => "u64".into(),
        Type::Float32 => "f32".into(),
        Type::Float64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::List(l) => format!("list<{}>", type_name(&l.ty())),
        Type::Option(o) => format!("option<{}>", type_name(&o.ty())),
        Type::Result(r) => {
            let ok = r.ok().map_or("_".to_string(), |t| type_name(&t));
            let err = r.err().map_or("_".to_string(), |t| type_name(&t));
            format!("result<{ok}, {err}>")
        }
        Type::Tuple(t) => {
            let items: Vec<String> = t.types().map(|t| type_name(&t)).collect();
            format!("tuple<{}>", items.join(", "))
        }
        Type::Record(r) => {
            let fields: Vec<String> = r
                .fields()
                .map(|f| format!("{}: {}", f.name, type_name(&f.ty)))
                .collect();
            format!("record {{ {} }}", fields.join(", "))
        }
        Type::Enum(e) => format!("enum {{ {} }}", e.names().collect::<Vec<_>>().join(", ")),
        Type::Variant(v) => format!(
            "variant {{ {} }}",
            v.cases().map(|c| c.name).collect::<Vec<_>>().join(", ")
        ),
        Type::Flags(f) => format!("flags {{ {} }}", f.names().collect::<Vec<_>>().join(", ")),
        Type::Own(_) => "own<resource>".into(),
        Type::Borrow(_) => "borrow<resource>".into(),
        other => format!("{other:?}"),
    }
}
