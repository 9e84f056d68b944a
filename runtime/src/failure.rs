//! Why a task failed, in the fixed vocabulary of `Task.status` reasons.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The failure classes. Serialized as exactly these names (they are `Task.status` reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FailureKind {
    /// The guest failed: a Wasm trap (unreachable, stack overflow, out-of-bounds, memory limit),
    /// a panic, `exit`, or an `err` returned from `initialize`/`execute` without a host failure.
    Trap,
    /// The fuel budget ran out (Wasm instructions plus host-call charges).
    FuelExhausted,
    /// The wall-clock deadline passed (epoch interruption).
    DeadlineExceeded,
    /// The guest used, or the task required, a capability it was not granted, or broke a quota
    /// or an allow-list — even if the guest then recovered and returned `ok`.
    CapabilityDenied,
    /// The host failed: a granted host call failed (backend/network error) and the guest gave up,
    /// storage could not commit, the input was too large, or the executor itself failed.
    HostError,
    /// The bytes are not a loadable `ainur:ari/agent@2.0.0` component.
    InvalidModule,
    /// The output exceeded `maxOutputBytes`.
    OutputTooLarge,
}

impl FailureKind {
    pub const ALL: [FailureKind; 7] = [
        FailureKind::Trap,
        FailureKind::FuelExhausted,
        FailureKind::DeadlineExceeded,
        FailureKind::CapabilityDenied,
        FailureKind::HostError,
        FailureKind::InvalidModule,
        FailureKind::OutputTooLarge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Trap => "Trap",
            FailureKind::FuelExhausted => "FuelExhausted",
            FailureKind::DeadlineExceeded => "DeadlineExceeded",
            FailureKind::CapabilityDenied => "CapabilityDenied",
            FailureKind::HostError => "HostError",
            FailureKind::InvalidModule => "InvalidModule",
            FailureKind::OutputTooLarge => "OutputTooLarge",
        }
    }

    /// The `ari run` exit code for this class (documented in docs/runtime.md and `--help`).
    pub fn exit_code(self) -> u8 {
        match self {
            FailureKind::Trap => 10,
            FailureKind::FuelExhausted => 11,
            FailureKind::DeadlineExceeded => 12,
            FailureKind::CapabilityDenied => 13,
            FailureKind::HostError => 14,
            FailureKind::InvalidModule => 15,
            FailureKind::OutputTooLarge => 16,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified failure: the class and a message for humans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// Classifies an error that came out of a call into the guest.
///
/// `memory_hit` is the limiter's message when it refused growth; it wins over the trap code,
/// because a refused `memory.grow` surfaces as a host error or a later `unreachable`.
pub fn classify_call_error(err: &wasmtime::Error, memory_hit: Option<&str>) -> Failure {
    if let Some(trap) = err.downcast_ref::<wasmtime::Trap>() {
        return match trap {
            wasmtime::Trap::OutOfFuel => {
                Failure::new(FailureKind::FuelExhausted, "fuel budget exhausted")
            }
            wasmtime::Trap::Interrupt => {
                Failure::new(FailureKind::DeadlineExceeded, "deadline exceeded")
            }
            wasmtime::Trap::StackOverflow => Failure::new(
                FailureKind::Trap,
                "stack overflow: wasm call stack exhausted",
            ),
            other => match memory_hit {
                Some(hit) => Failure::new(FailureKind::Trap, format!("{hit} (then: {other})")),
                None => Failure::new(FailureKind::Trap, format!("wasm trap: {other}")),
            },
        };
    }
    if let Some(hit) = memory_hit {
        return Failure::new(FailureKind::Trap, hit);
    }
    if let Some(hit) = err.downcast_ref::<crate::trace::TraceLimitHit>() {
        return Failure::new(FailureKind::Trap, hit.to_string());
    }
    if let Some(exit) = err.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return Failure::new(FailureKind::Trap, format!("guest called exit({})", exit.0));
    }
    Failure::new(FailureKind::Trap, format!("guest failed: {err:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_names_are_the_reasons() {
        for kind in FailureKind::ALL {
            let json = serde_json::to_string(&kind).expect("serialize");
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
    }

    #[test]
    fn exit_codes_are_distinct() {
        let mut codes: Vec<u8> = FailureKind::ALL.iter().map(|k| k.exit_code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), FailureKind::ALL.len());
    }

    #[test]
    fn trap_codes_map_to_classes() {
        let fuel = wasmtime::Error::from(wasmtime::Trap::OutOfFuel);
        assert_eq!(
            classify_call_error(&fuel, None).kind,
            FailureKind::FuelExhausted
        );
        let epoch = wasmtime::Error::from(wasmtime::Trap::Interrupt);
        assert_eq!(
            classify_call_error(&epoch, None).kind,
            FailureKind::DeadlineExceeded
        );
        let unreachable = wasmtime::Error::from(wasmtime::Trap::UnreachableCodeReached);
        let f = classify_call_error(&unreachable, Some("memory limit hit: x"));
        assert_eq!(f.kind, FailureKind::Trap);
        assert!(f.message.contains("memory limit hit"));
    }
}
