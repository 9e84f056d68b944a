//! The fuel each host call costs: `base + per_byte × bytes moved`.
//!
//! One unit of fuel is about one Wasm instruction. The numbers are set so that a host call
//! costs roughly what the same work would cost the guest in Wasm, so fuel keeps bounding
//! total work deterministically no matter how it is split between guest and host. The table is
//! part of the contract (docs/runtime.md); changing it changes `resourcesUsed.fuel` of replays.

/// Cost of one host function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FuelCost {
    pub base: u64,
    pub per_byte: u64,
}

impl FuelCost {
    pub const fn new(base: u64, per_byte: u64) -> Self {
        Self { base, per_byte }
    }

    /// Fuel for a call that moves `bytes` bytes (saturating, never overflows).
    pub fn charge(self, bytes: usize) -> u64 {
        self.base
            .saturating_add(self.per_byte.saturating_mul(bytes as u64))
    }
}

/// `log`: bytes of the message.
pub const LOG: FuelCost = FuelCost::new(500, 1);
/// `storage-get`: bytes of key and returned value.
pub const STORAGE_GET: FuelCost = FuelCost::new(2_000, 2);
/// `storage-set`: bytes of key and value.
pub const STORAGE_SET: FuelCost = FuelCost::new(5_000, 4);
/// `storage-delete`: bytes of the key.
pub const STORAGE_DELETE: FuelCost = FuelCost::new(2_000, 2);
/// `random-bytes`: bytes requested.
pub const RANDOM_BYTES: FuelCost = FuelCost::new(500, 2);
/// `hash` (SHA-256): bytes hashed.
pub const HASH: FuelCost = FuelCost::new(500, 4);
/// `sign` (Ed25519): bytes signed.
pub const SIGN: FuelCost = FuelCost::new(50_000, 4);
/// `verify` (Ed25519): bytes verified.
pub const VERIFY: FuelCost = FuelCost::new(100_000, 4);
/// `http-request`: bytes sent (URL, headers, body) and received (headers, body).
pub const HTTP_REQUEST: FuelCost = FuelCost::new(200_000, 2);
/// `now`: no payload.
pub const NOW: FuelCost = FuelCost::new(200, 0);

/// Every entry, for the docs and the `ari inspect` listing.
pub const TABLE: [(&str, FuelCost); 10] = [
    ("log", LOG),
    ("storage-get", STORAGE_GET),
    ("storage-set", STORAGE_SET),
    ("storage-delete", STORAGE_DELETE),
    ("random-bytes", RANDOM_BYTES),
    ("hash", HASH),
    ("sign", SIGN),
    ("verify", VERIFY),
    ("http-request", HTTP_REQUEST),
    ("now", NOW),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charge_is_base_plus_bytes_and_saturates() {
        assert_eq!(HASH.charge(10), 540);
        assert_eq!(FuelCost::new(u64::MAX, 1).charge(5), u64::MAX);
    }
}
