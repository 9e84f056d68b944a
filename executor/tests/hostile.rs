//! Every hostile agent is stopped with the right class, and the same runtime goes on serving.
mod common;

use std::time::Duration;

use ari_executor::{FailureKind, Limits};
use common::*;

fn assert_kind(o: &ari_executor::TaskOutcome, kind: FailureKind, needle: &str) {
    let f = o
        .failure
        .as_ref()
        .unwrap_or_else(|| panic!("expected {kind}, task succeeded"));
    assert_eq!(f.kind, kind, "{f}");
    assert!(
        f.message.contains(needle),
        "message {:?} lacks {needle:?}",
        f.message
    );
    assert!(o.output.is_empty());
    assert!(o.attestation.verify_signature(None).is_ok());
    assert_echo_works();
}

#[test]
fn spin_runs_out_of_fuel() {
    let o = run_with_limits(
        "spin",
        "",
        Limits {
            fuel: 5_000_000,
            ..Limits::default()
        },
    );
    assert_kind(&o, FailureKind::FuelExhausted, "fuel");
    assert_eq!(o.resources_used.fuel, 5_000_000);
}

#[test]
fn spin_with_huge_fuel_hits_the_deadline() {
    let limits = Limits {
        fuel: u64::MAX / 2,
        timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let o = run_with_limits("spin", "", limits);
    assert_kind(&o, FailureKind::DeadlineExceeded, "deadline");
}

#[test]
fn balloon_hits_the_memory_limit() {
    let limits = Limits {
        memory_bytes: 16 << 20,
        ..Limits::default()
    };
    let o = run_with_limits("balloon", "", limits);
    assert_kind(&o, FailureKind::Trap, "memory limit");
    assert!(o.resources_used.memory_bytes <= 16 << 20);
    assert!(o.resources_used.memory_bytes > 8 << 20);
}

#[test]
fn deep_overflows_the_stack() {
    let o = run_with_limits("deep", "", Limits::default());
    let f = o.failure.as_ref().expect("deep must fail");
    assert_eq!(f.kind, FailureKind::Trap, "{f}");
    assert!(
        f.message.contains("stack") || f.message.contains("out of bounds"),
        "{f}"
    );
    assert_echo_works();
}

#[test]
fn trap_is_a_trap() {
    let o = run_with_limits("trap", "", Limits::default());
    assert_kind(&o, FailureKind::Trap, "unreachable");
}

#[test]
fn flood_output_is_too_large() {
    let limits = Limits {
        memory_bytes: 64 << 20,
        max_output_bytes: 1 << 20,
        ..Limits::default()
    };
    let o = run_with_limits("flood", "8", limits);
    assert_kind(&o, FailureKind::OutputTooLarge, "output");
}

#[test]
fn exfil_to_a_host_not_granted_is_denied() {
    let allowed = http::Server::start();
    let secret_sink = http::Server::start();
    let o = run(
        "exfil",
        &format!("{}/steal", secret_sink.base),
        grants(&[&format!("network={}", allowed.base)]),
    );
    assert_kind(&o, FailureKind::CapabilityDenied, "");
    assert_eq!(
        secret_sink.hits(),
        0,
        "the secret reached a host that was not granted"
    );
}

#[test]
fn exfil_via_redirect_to_a_host_not_granted_is_denied() {
    let allowed = http::Server::start();
    let secret_sink = http::Server::start();
    let url = format!("{}/redirect?to={}/steal", allowed.base, secret_sink.base);
    let o = run(
        "exfil",
        &url,
        grants(&[&format!("network={}", allowed.base)]),
    );
    assert_kind(&o, FailureKind::CapabilityDenied, "");
    assert_eq!(allowed.hits(), 1, "the first hop is allowed");
    assert_eq!(secret_sink.hits(), 0, "the redirect must not be followed");
}

#[test]
fn hoarder_hits_its_quota() {
    let o = run("hoarder", "1000", grants(&["storage=64KiB"]));
    assert_kind(&o, FailureKind::CapabilityDenied, "quota");
}
