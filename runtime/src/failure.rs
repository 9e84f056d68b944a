//! Why a task failed, in the fixed vocabulary of `Task.status` reasons.

pub use ari_model::{Failure, FailureKind};

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
    if err.downcast_ref::<crate::cancel::Cancelled>().is_some() {
        return Failure::new(FailureKind::Cancelled, "cancelled while running");
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
