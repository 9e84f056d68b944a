//! `servers`, `list-tools` and `call-tool` of `interface tools`: linkage, fuel, and the WIT
//! records' conversions from the types of `ari-mcp`.

use ari_mcp::{ToolError, ToolInfo, ToolResult};
use wasmtime::component::LinkerInstance;

use super::{Ending, ToolsCapability};
use crate::bindings::tools as wit;
use crate::capability::CapError;
use crate::capability::io;
use crate::fuel_costs::FuelCost;
use crate::host::{Cx, HostFunctions, charge, charge_bytes};
use crate::state::TaskState;

/// The fully qualified name of the interface.
pub const TOOLS_IMPORT: &str = "ainur:ari/tools@2.0.0";

/// A tools exchange: bytes of the request, then of the answer. The base is high: each is a
/// server round trip and a record in the trace, so a guest calling in a loop pays for it.
pub const CALL: FuelCost = FuelCost::new(500_000, 2);
/// `servers`: the names listed.
pub const SERVERS: FuelCost = FuelCost::new(1_000, 2);
/// This capability's entries of the fuel table.
pub const FUEL: &[(&str, FuelCost)] = &[
    ("servers", SERVERS),
    ("list-tools", CALL),
    ("call-tool", CALL),
];

/// This capability's host functions (its `Capability::HOST`).
pub(crate) const HOST: HostFunctions = HostFunctions {
    interface: TOOLS_IMPORT,
    link,
    fuel: FUEL,
};

fn link(tools: &mut LinkerInstance<'_, TaskState>) -> wasmtime::Result<()> {
    tools.func_wrap("servers", |mut cx: Cx<'_>, (): ()| {
        let names = cx.data().caps().get::<ToolsCapability>().servers();
        charge(&mut cx, SERVERS, names.iter().map(String::len).sum())?;
        Ok((names,))
    })?;
    tools.func_wrap("list-tools", |mut cx: Cx<'_>, (server,): (String,)| {
        charge(&mut cx, CALL, server.len())?;
        let ending = cx
            .data()
            .caps()
            .with(|t: &mut ToolsCapability, rec| t.list(&server, rec));
        let result = settle(&mut cx, ending)?.map(|tools| {
            tools
                .into_iter()
                .map(from_info)
                .collect::<Vec<wit::ToolInfo>>()
        });
        if let Ok(tools) = &result {
            let bytes: usize = tools.iter().map(info_bytes).sum();
            charge_bytes(&mut cx, CALL, bytes)?;
        }
        Ok((result,))
    })?;
    tools.func_wrap(
        "call-tool",
        |mut cx: Cx<'_>, (server, tool, arguments): (String, String, String)| {
            charge(&mut cx, CALL, server.len() + tool.len() + arguments.len())?;
            let ending = cx
                .data()
                .caps()
                .with(|t: &mut ToolsCapability, rec| t.call(&server, &tool, &arguments, rec));
            let result = settle(&mut cx, ending)?.map(from_result);
            if let Ok(answer) = &result {
                let bytes = answer.text.len()
                    + answer.content.len()
                    + answer.structured.as_ref().map_or(0, String::len);
                charge_bytes(&mut cx, CALL, bytes)?;
            }
            Ok((result,))
        },
    )
}

/// What the guest gets of an exchange's ending ([`io::settle`]).
fn settle<T>(
    cx: &mut Cx<'_>,
    ending: Result<Ending<T>, CapError>,
) -> wasmtime::Result<Result<T, wit::ToolError>> {
    let denial: fn(&ToolError) -> Option<&String> = |e| match e {
        ToolError::Denied { message } => Some(message),
        _ => None,
    };
    io::settle(cx, ending, denial, to_wit_error)
}

fn to_wit_error(error: ToolError) -> wit::ToolError {
    match error {
        ToolError::Denied { message } => wit::ToolError::Denied(message),
        ToolError::NotFound { message } => wit::ToolError::NotFound(message),
        ToolError::InvalidArguments { message } => wit::ToolError::InvalidArguments(message),
        ToolError::Unavailable { message } => wit::ToolError::Unavailable(message),
        ToolError::Timeout { message } => wit::ToolError::Timeout(message),
        ToolError::TooLarge { message } => wit::ToolError::TooLarge(message),
        ToolError::ServerError { message } => wit::ToolError::ServerError(message),
        ToolError::Rejected { message } => wit::ToolError::Rejected(message),
    }
}

fn from_info(t: ToolInfo) -> wit::ToolInfo {
    wit::ToolInfo {
        name: t.name,
        title: t.title,
        description: t.description,
        input_schema: t.input_schema.to_string(),
        hints: wit::ToolHints {
            read_only: t.hints.read_only,
            destructive: t.hints.destructive,
            idempotent: t.hints.idempotent,
            open_world: t.hints.open_world,
        },
    }
}

fn info_bytes(t: &wit::ToolInfo) -> usize {
    t.name.len()
        + t.title.as_ref().map_or(0, String::len)
        + t.description.as_ref().map_or(0, String::len)
        + t.input_schema.len()
}

fn from_result(r: ToolResult) -> wit::ToolResult {
    wit::ToolResult {
        text: r.text(),
        content: serde_json::Value::Array(r.content).to_string(),
        structured: r.structured.map(|s| s.to_string()),
        is_error: r.is_error,
    }
}
