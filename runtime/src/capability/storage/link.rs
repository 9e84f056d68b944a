//! `storage-get`, `storage-set` and `storage-delete`: their linkage, fuel costs and errors.

use wasmtime::component::LinkerInstance;

use super::TaskStorage;
use crate::bindings::StorageError;
use crate::capability::CapError;
use crate::fuel_costs::FuelCost;
use crate::host::{Cx, HostFunctions, charge, charge_bytes, guest_result};
use crate::state::TaskState;

/// `storage-get`: bytes of key and returned value.
pub const GET: FuelCost = FuelCost::new(2_000, 2);
/// `storage-set`: bytes of key and value.
pub const SET: FuelCost = FuelCost::new(5_000, 4);
/// `storage-delete`: bytes of the key.
pub const DELETE: FuelCost = FuelCost::new(2_000, 2);
/// This capability's entries of the fuel table.
pub const FUEL: &[(&str, FuelCost)] = &[
    ("storage-get", GET),
    ("storage-set", SET),
    ("storage-delete", DELETE),
];

/// This capability's host functions (its `Capability::HOST`).
pub(crate) const HOST: HostFunctions = HostFunctions {
    interface: crate::bindings::HOST_IMPORT,
    link,
    fuel: FUEL,
};

fn link(host: &mut LinkerInstance<'_, TaskState>) -> wasmtime::Result<()> {
    host.func_wrap("storage-get", |mut cx: Cx<'_>, (key,): (String,)| {
        charge(&mut cx, GET, key.len())?;
        let result = cx
            .data()
            .caps()
            .call(|s: &mut TaskStorage, rec| s.get(&key, rec));
        let result = guest_result(&mut cx, result, storage_error)?;
        if let Ok(Some(value)) = &result {
            charge_bytes(&mut cx, GET, value.len())?;
        }
        Ok((result,))
    })?;
    host.func_wrap(
        "storage-set",
        |mut cx: Cx<'_>, (key, value): (String, Vec<u8>)| {
            charge(&mut cx, SET, key.len() + value.len())?;
            let result = cx
                .data()
                .caps()
                .call(|s: &mut TaskStorage, rec| s.set(&key, &value, rec));
            Ok((guest_result(&mut cx, result, storage_error)?,))
        },
    )?;
    host.func_wrap("storage-delete", |mut cx: Cx<'_>, (key,): (String,)| {
        charge(&mut cx, DELETE, key.len())?;
        let result = cx
            .data()
            .caps()
            .call(|s: &mut TaskStorage, rec| s.delete(&key, rec));
        Ok((guest_result(&mut cx, result, storage_error)?,))
    })
}

/// A capability error as `storage-error`. A conflict is `failed` to the guest: the runtime
/// runs the task again anyway.
fn storage_error(err: CapError) -> StorageError {
    match err {
        CapError::Denied(msg) => StorageError::Denied(msg),
        CapError::QuotaExceeded(msg) => StorageError::QuotaExceeded(msg),
        CapError::Invalid(msg) => StorageError::InvalidKey(msg),
        other => StorageError::Failed(other.to_string()),
    }
}
