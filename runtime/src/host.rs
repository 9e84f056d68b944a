//! The `ainur:ari/host@2.0.0` imports: each capability links its own functions (its `link`
//! module: linkage, fuel costs, error mapping); this module gathers them and holds what they
//! share: fuel charging on the `Store`, the trace ceiling and the guest-facing result.
//!
//! Capability errors become the WIT's typed errors for the guest, never a trap. The only traps
//! raised here are fuel exhaustion (a host call the budget cannot pay for) and a trace over its
//! ceiling (`trace::MAX_TRACE_BYTES`).

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, LinkerInstance};

use crate::bindings::ErrorCode;
use crate::capability::{self, CapError};
use crate::fuel_costs::FuelCost;
use crate::state::TaskState;
use crate::trace::{MAX_TRACE_BYTES, TraceLimitHit};

pub(crate) type Cx<'a> = StoreContextMut<'a, TaskState>;

/// What a capability declares to the host (in its `link` module): how to link its functions
/// and what each costs. `capability::HOSTS` lists every capability's.
pub(crate) struct HostFunctions {
    /// The WIT interface they belong to (`HOST_IMPORT`, or the capability's own).
    pub interface: &'static str,
    pub link: fn(&mut LinkerInstance<'_, TaskState>) -> wasmtime::Result<()>,
    pub fuel: &'static [(&'static str, FuelCost)],
}

/// Adds the imported interfaces to `linker`: every capability's functions, each in its
/// interface.
pub(crate) fn add_to_linker(linker: &mut Linker<TaskState>) -> wasmtime::Result<()> {
    let mut interfaces: Vec<&str> = capability::HOSTS.iter().map(|c| c.interface).collect();
    interfaces.dedup();
    interfaces.sort_unstable();
    interfaces.dedup();
    for interface in interfaces {
        let mut instance = linker.instance(interface)?;
        for capability in capability::HOSTS
            .iter()
            .filter(|c| c.interface == interface)
        {
            (capability.link)(&mut instance)?;
        }
    }
    Ok(())
}

/// Charges `cost` for a call moving `bytes`; traps with `OutOfFuel` when the budget cannot pay.
pub(crate) fn charge(cx: &mut Cx<'_>, cost: FuelCost, bytes: usize) -> wasmtime::Result<()> {
    take_fuel(cx, cost.charge(bytes))
}

/// Charges only the per-byte part (for data that arrives after the call was paid for).
pub(crate) fn charge_bytes(cx: &mut Cx<'_>, cost: FuelCost, bytes: usize) -> wasmtime::Result<()> {
    take_fuel(cx, FuelCost::new(0, cost.per_byte).charge(bytes))
}

fn take_fuel(cx: &mut Cx<'_>, fuel: u64) -> wasmtime::Result<()> {
    // `get_fuel` fails only when the engine does not meter fuel (the fuel-off benchmark).
    let Ok(left) = cx.get_fuel() else {
        return Ok(());
    };
    if fuel > left {
        cx.set_fuel(0)?;
        cx.data_mut().host_fuel += left;
        return Err(wasmtime::Trap::OutOfFuel.into());
    }
    cx.set_fuel(left - fuel)?;
    cx.data_mut().host_fuel += fuel;
    Ok(())
}

/// Traps when the call overflowed the task's trace, before the guest sees its result.
pub(crate) fn check_trace(cx: &Cx<'_>) -> wasmtime::Result<()> {
    if cx.data().caps().trace_overflowed() {
        return Err(TraceLimitHit(MAX_TRACE_BYTES).into());
    }
    Ok(())
}

/// Maps a capability result to what the guest sees (`to_guest` picks the WIT error type),
/// remembering host failures for classification (denials are remembered by the capabilities
/// themselves).
pub(crate) fn guest_result<T, E>(
    cx: &mut Cx<'_>,
    result: Result<T, CapError>,
    to_guest: fn(CapError) -> E,
) -> wasmtime::Result<Result<T, E>> {
    check_trace(cx)?;
    Ok(result.map_err(|err| {
        if matches!(
            err,
            CapError::Failed(_) | CapError::Conflict(_) | CapError::DeadlineExceeded
        ) {
            remember_failure(cx, err.to_string());
        }
        to_guest(err)
    }))
}

/// Keeps a host failure for classification.
fn remember_failure(cx: &mut Cx<'_>, msg: String) {
    // Bounded: a guest looping on a failing call must not grow host memory.
    let failures = &mut cx.data_mut().host_failures;
    if failures.len() < capability::MAX_NOTED {
        failures.push(msg);
    }
}

/// A capability error as `error-code`, the type of every call without an error type of its own.
pub(crate) fn error_code(err: CapError) -> ErrorCode {
    match err {
        CapError::Denied(msg) | CapError::QuotaExceeded(msg) => ErrorCode::Denied(msg),
        CapError::Invalid(msg) => ErrorCode::InvalidInput(msg),
        other => ErrorCode::Failed(other.to_string()),
    }
}
