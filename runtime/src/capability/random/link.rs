//! `random-bytes`: its linkage and fuel cost.

use wasmtime::component::LinkerInstance;

use super::RandomCapability;
use crate::fuel_costs::FuelCost;
use crate::host::{Cx, HostFunctions, charge, error_code, guest_result};
use crate::state::TaskState;

/// `random-bytes`: bytes requested.
pub const RANDOM_BYTES: FuelCost = FuelCost::new(500, 2);
/// This capability's entries of the fuel table.
pub const FUEL: &[(&str, FuelCost)] = &[("random-bytes", RANDOM_BYTES)];

/// This capability's host functions (its `Capability::HOST`).
pub(crate) const HOST: HostFunctions = HostFunctions {
    interface: crate::bindings::HOST_IMPORT,
    link,
    fuel: FUEL,
};

fn link(host: &mut LinkerInstance<'_, TaskState>) -> wasmtime::Result<()> {
    host.func_wrap("random-bytes", |mut cx: Cx<'_>, (len,): (u32,)| {
        charge(&mut cx, RANDOM_BYTES, len as usize)?;
        let result = cx
            .data()
            .caps()
            .call(|r: &mut RandomCapability, rec| r.random_bytes(len, rec));
        Ok((guest_result(&mut cx, result, error_code)?,))
    })
}
