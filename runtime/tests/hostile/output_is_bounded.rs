//! Output and logs: a guest cannot make the host hold or emit more than the task's budgets.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ari_runtime::{FailureKind, Limits};

use crate::common::*;
use crate::support::*;

#[test]
fn flood_output_is_too_large() {
    let limits = Limits {
        memory_bytes: 64 << 20,
        max_output_bytes: 1 << 20,
        ..Limits::default()
    };
    let o = run_with_limits("flood", "8", limits);
    assert_failed(&o, FailureKind::OutputTooLarge, "output");
}

/// Counts the bytes of guest log events the host emits (target `ari::guest`).
struct GuestLogBytes(Arc<AtomicU64>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for GuestLogBytes {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Len(u64);
        impl tracing::field::Visit for Len {
            fn record_debug(&mut self, _: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0 += format!("{v:?}").len() as u64;
            }
        }
        if event.metadata().target() == "ari::guest" {
            let mut len = Len(0);
            event.record(&mut len);
            self.0.fetch_add(len.0, Ordering::Relaxed);
        }
    }
}

#[test]
fn loud_log_is_capped_metered_and_bounded() {
    use tracing_subscriber::layer::SubscriberExt;
    let emitted = Arc::new(AtomicU64::new(0));
    let subscriber = tracing_subscriber::registry().with(GuestLogBytes(emitted.clone()));
    let o = tracing::subscriber::with_default(subscriber, || {
        run_req("loud-log", "8 100000", grants(&[]), Limits::default())
    });
    assert_eq!(o.failure, None, "{:?}", o.failure);
    let report: serde_json::Value = serde_json::from_slice(&o.output).expect("json report");
    let sent = report["bytes"].as_u64().expect("bytes");
    assert!(sent > 24 << 20, "{report}");
    // The task log holds at most the budget plus one marker that says what was dropped.
    assert!(log_bytes(&o) <= 64 * 1024 + 200, "kept {}", log_bytes(&o));
    let marker = o.logs.last().expect("a marker line");
    assert!(marker.contains("log truncated"), "{marker}");
    assert!(
        o.resources_used.fuel > 8 << 20,
        "the huge line was not charged"
    );
    // The executor's own log output is bounded the same way (dropped lines are not emitted).
    let emitted = emitted.load(Ordering::Relaxed);
    assert!(
        emitted <= 128 * 1024,
        "the host emitted {emitted} bytes of guest log"
    );
    assert_host_memory_bounded();
    assert_echo_works();
}

#[test]
fn loud_log_out_of_fuel_ends_on_fuel() {
    let o = run_req("loud-log", "8 100000", grants(&[]), fuel(4_000_000));
    assert_failed(&o, FailureKind::FuelExhausted, "fuel");
    assert!(log_bytes(&o) <= 64 * 1024 + 200);
}
