//! Escapes: a trap is only a trap; WASI gives no files, sockets or environment; HTTP reaches only
//! granted hosts, at every redirect hop.

use std::io::ErrorKind;
use std::net::TcpListener;

use ari_runtime::{FailureKind, Limits};

use crate::common::*;
use crate::support::*;

#[test]
fn trap_is_a_trap() {
    let o = run_with_limits("trap", "", Limits::default());
    assert_failed(&o, FailureKind::Trap, "unreachable");
}

#[test]
fn wasi_escape_gets_nothing_of_the_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "the-host-secret").expect("write secret");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    listener.set_nonblocking(true).expect("nonblocking");
    let marker = std::path::Path::new("/tmp/ari-wasi-escape");
    let marker_existed = marker.exists();

    let input = format!("path={}\ntcp={addr}", secret.display());
    let o = run("wasi-escape", &input, grants(&[]));
    assert_eq!(o.failure, None, "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.output).expect("json report");
    assert_eq!(report["leaks"], 0, "{report:#}");
    let attempts = report["attempts"].as_array().expect("attempts");
    assert!(attempts.len() >= 15, "{report:#}");
    for a in attempts {
        assert_eq!(a["leak"], false, "{a}");
    }
    let out = output(&o);
    assert!(
        !out.contains("the-host-secret") && !out.contains("root:"),
        "{out}"
    );
    // Nothing reached the listener, and no file appeared on the host.
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the guest reached a host socket: {other:?}"),
    }
    assert!(
        marker_existed || !marker.exists(),
        "the guest created a host file"
    );
    assert!(
        o.trace.events.is_empty(),
        "WASI calls must not reach recorded capabilities"
    );
    assert_echo_works();
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
    assert_failed(&o, FailureKind::CapabilityDenied, "");
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
    assert_failed(&o, FailureKind::CapabilityDenied, "");
    assert_eq!(allowed.hits(), 1, "the first hop is allowed");
    assert_eq!(secret_sink.hits(), 0, "the redirect must not be followed");
}
