//! The fuel each host call costs: `base + per_byte × bytes moved`. Each capability declares
//! its own costs (its `link` module); [`table`] gathers them.
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

/// Every host function's cost, gathered from the capabilities that declare them (each
/// capability's `link` module), for the docs and `ari inspect`.
pub fn table() -> Vec<(&'static str, FuelCost)> {
    crate::capability::HOSTS
        .iter()
        .flat_map(|c| c.fuel.iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charge_is_base_plus_bytes_and_saturates() {
        assert_eq!(FuelCost::new(500, 4).charge(10), 540);
        assert_eq!(FuelCost::new(u64::MAX, 1).charge(5), u64::MAX);
    }

    #[test]
    fn every_host_function_of_the_contract_has_one_cost() {
        let names: Vec<&str> = table().iter().map(|(n, _)| *n).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            names.len(),
            "a cost declared twice: {names:?}"
        );
        assert_eq!(
            names,
            [
                "log",
                "storage-get",
                "storage-set",
                "storage-delete",
                "random-bytes",
                "hash",
                "sign",
                "verify",
                "http-request",
                "now",
                "delegate",
                "start-child",
                "await-child",
                "send-message",
                "chat",
                "embed",
                "models",
                "servers",
                "list-tools",
                "call-tool",
                "history",
                "ask-for-input"
            ]
        );
    }
}
