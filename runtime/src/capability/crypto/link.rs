//! `hash`, `sign` and `verify`: their linkage and fuel costs.

use wasmtime::component::LinkerInstance;

use super::{CryptoCapability, HashAlgorithm};
use crate::bindings;
use crate::fuel_costs::FuelCost;
use crate::host::{Cx, HostFunctions, charge, error_code, guest_result};
use crate::state::TaskState;

/// `hash` (any algorithm): bytes hashed.
pub const HASH: FuelCost = FuelCost::new(500, 4);
/// `sign` (Ed25519): bytes signed.
pub const SIGN: FuelCost = FuelCost::new(50_000, 4);
/// `verify` (Ed25519): bytes verified.
pub const VERIFY: FuelCost = FuelCost::new(100_000, 4);
/// This capability's entries of the fuel table.
pub const FUEL: &[(&str, FuelCost)] = &[("hash", HASH), ("sign", SIGN), ("verify", VERIFY)];

/// This capability's host functions (its `Capability::HOST`).
pub(crate) const HOST: HostFunctions = HostFunctions {
    interface: crate::bindings::HOST_IMPORT,
    link,
    fuel: FUEL,
};

fn link(host: &mut LinkerInstance<'_, TaskState>) -> wasmtime::Result<()> {
    host.func_wrap(
        "hash",
        |mut cx: Cx<'_>, (algorithm, data): (bindings::HashAlgorithm, Vec<u8>)| {
            charge(&mut cx, HASH, data.len())?;
            let mut caps = cx.data().caps();
            Ok((caps
                .get::<CryptoCapability>()
                .hash(hash_algorithm(algorithm), &data),))
        },
    )?;
    host.func_wrap("sign", |mut cx: Cx<'_>, (data,): (Vec<u8>,)| {
        charge(&mut cx, SIGN, data.len())?;
        let result = cx
            .data()
            .caps()
            .call(|c: &mut CryptoCapability, _| c.sign(&data));
        Ok((guest_result(&mut cx, result, error_code)?,))
    })?;
    host.func_wrap(
        "verify",
        |mut cx: Cx<'_>, (public_key, data, signature): (Vec<u8>, Vec<u8>, Vec<u8>)| {
            charge(&mut cx, VERIFY, data.len())?;
            let mut caps = cx.data().caps();
            Ok((caps
                .get::<CryptoCapability>()
                .verify(&public_key, &data, &signature),))
        },
    )
}

fn hash_algorithm(algorithm: bindings::HashAlgorithm) -> HashAlgorithm {
    match algorithm {
        bindings::HashAlgorithm::Sha256 => HashAlgorithm::Sha256,
        bindings::HashAlgorithm::Sha384 => HashAlgorithm::Sha384,
        bindings::HashAlgorithm::Sha512 => HashAlgorithm::Sha512,
    }
}
