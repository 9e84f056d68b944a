//! `log`'s host function and its fuel cost.

use wasmtime::component::LinkerInstance;

use super::{LogCapability, LogLevel};
use crate::bindings;
use crate::fuel_costs::FuelCost;
use crate::host::{Cx, HostFunctions, charge};
use crate::state::TaskState;

/// `log`: bytes of the message.
pub const LOG: FuelCost = FuelCost::new(500, 1);
/// This capability's entries of the fuel table.
pub const FUEL: &[(&str, FuelCost)] = &[("log", LOG)];

/// This capability's host functions (its `Capability::HOST`).
pub(crate) const HOST: HostFunctions = HostFunctions {
    interface: crate::bindings::HOST_IMPORT,
    link,
    fuel: FUEL,
};

fn link(host: &mut LinkerInstance<'_, TaskState>) -> wasmtime::Result<()> {
    host.func_wrap(
        "log",
        |mut cx: Cx<'_>, (level, message): (bindings::LogLevel, String)| {
            charge(&mut cx, LOG, message.len())?;
            cx.data()
                .caps()
                .get::<LogCapability>()
                .log(log_level(level), &message);
            Ok(())
        },
    )
}

fn log_level(level: bindings::LogLevel) -> LogLevel {
    match level {
        bindings::LogLevel::Trace => LogLevel::Trace,
        bindings::LogLevel::Debug => LogLevel::Debug,
        bindings::LogLevel::Info => LogLevel::Info,
        bindings::LogLevel::Warn => LogLevel::Warn,
        bindings::LogLevel::Error => LogLevel::Error,
    }
}
