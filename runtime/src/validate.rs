//! Early, readable rejection of bytes that cannot be an ari agent.

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::bindings::AGENT_EXPORT;

/// Checks the binary header: a component, not a core module or something else.
pub(crate) fn check_header(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err("not a WebAssembly binary (missing the \\0asm header)".into());
    }
    match &bytes[4..8] {
        [0x0d, 0x00, 0x01, 0x00] => Ok(()),
        [0x01, 0x00, 0x00, 0x00] => Err("module is a core wasm module, not a component; build \
                                         for wasm32-wasip2 (or wrap it with `wasm-tools \
                                         component new`)"
            .into()),
        v => Err(format!(
            "unsupported WebAssembly version/layer {v:02x?} (expected a component, 0d 00 01 00)"
        )),
    }
}

/// Checks that the component exports the agent interface (any 2.x, which Wasmtime links by semver).
pub(crate) fn check_exports(engine: &Engine, component: &Component) -> Result<(), String> {
    let ty = component.component_type();
    let names: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    let (package, _) = AGENT_EXPORT.split_at(AGENT_EXPORT.len() - "2.0.0".len());
    if names
        .iter()
        .any(|n| n.starts_with(package) && n[package.len()..].starts_with('2'))
    {
        return Ok(());
    }
    let found = if names.is_empty() {
        "it exports nothing".to_string()
    } else {
        format!("it exports: {}", names.join(", "))
    };
    Err(format!(
        "component does not export {AGENT_EXPORT} ({found})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_check_names_the_problem() {
        let core = wat::parse_str("(module)").expect("wat");
        assert!(
            check_header(&core)
                .unwrap_err()
                .contains("core wasm module, not a component")
        );
        let comp = wat::parse_str("(component)").expect("wat");
        assert_eq!(check_header(&comp), Ok(()));
        assert!(
            check_header(b"hello world")
                .unwrap_err()
                .contains("not a WebAssembly binary")
        );
    }
}
