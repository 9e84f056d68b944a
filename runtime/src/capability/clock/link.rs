//! `now`: its linkage and fuel cost (the WASI clocks are charged the same, see `wasi`).

use wasmtime::component::LinkerInstance;

use super::ClockCapability;
use crate::fuel_costs::FuelCost;
use crate::host::{Cx, HostFunctions, charge, error_code, guest_result};
use crate::state::TaskState;

/// `now` (and each WASI clock read): no payload.
pub const NOW: FuelCost = FuelCost::new(200, 0);
/// This capability's entries of the fuel table.
pub const FUEL: &[(&str, FuelCost)] = &[("now", NOW)];

/// This capability's host functions (its `Capability::HOST`).
pub(crate) const HOST: HostFunctions = HostFunctions {
    interface: crate::bindings::HOST_IMPORT,
    link,
    fuel: FUEL,
};

fn link(host: &mut LinkerInstance<'_, TaskState>) -> wasmtime::Result<()> {
    host.func_wrap("now", |mut cx: Cx<'_>, (): ()| {
        charge(&mut cx, NOW, 0)?;
        let result = cx
            .data()
            .caps()
            .call(|c: &mut ClockCapability, rec| c.now(rec));
        Ok((guest_result(&mut cx, result, error_code)?,))
    })
}
