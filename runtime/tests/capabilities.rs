//! Every capability, granted and denied, through real example components.
use ari_testkit::runtime as common;

use ari_runtime::FailureKind;
use ari_runtime::capability::storage::{MemoryBackend, StorageBackend};
use common::*;

#[test]
fn echo_needs_no_capability() {
    let o = run("echo", "hello", grants(&[]));
    assert_eq!(o.failure, None);
    assert_eq!(output(&o), "hello");
    assert!(o.resources_used.fuel > 0);
    assert!(o.resources_used.memory_bytes > 0);
    assert!(o.attestation.verify(None).is_ok());
}

#[test]
fn storage_granted_persists_across_tasks_and_is_metered() {
    let backend = MemoryBackend::new();
    let agent = agent("counter");
    for expected in ["1", "2", "3"] {
        let mut req = request("", grants(&["storage=1MiB"]));
        req.storage = Some(Box::new(backend.clone()));
        let o = agent.run(req);
        assert_eq!(o.failure, None);
        assert_eq!(output(&o), expected);
        assert!(o.resources_used.storage_bytes > 0);
    }
}

#[test]
fn concurrent_storage_tasks_lose_no_update() {
    // Eight threads increment one counter: every commit that raced another runs again, so
    // the outputs are exactly 1..=N and the stored value is N (issue 7's lost updates).
    let backend = MemoryBackend::new();
    let agent = agent("counter");
    let (threads, per_thread) = (8, 25);
    let mut outputs: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (agent, backend) = (agent.clone(), backend.clone());
                s.spawn(move || {
                    (0..per_thread)
                        .map(|_| {
                            let mut req = request("", grants(&["storage=1MiB"]));
                            req.storage = Some(Box::new(backend.clone()));
                            let o = agent.run(req);
                            assert_eq!(o.failure, None);
                            output(&o).parse::<u64>().expect("count")
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    outputs.sort_unstable();
    let n = threads * per_thread;
    assert_eq!(outputs, (1..=n as u64).collect::<Vec<_>>());
}

#[test]
fn a_retried_storage_task_returns_its_committed_outcome_without_writing_again() {
    // The worker names each storage run's receipt after the Task: a second run of the same
    // Task (its executor died after the commit) is refused and the first outcome is kept.
    let backend = MemoryBackend::new();
    let agent = agent("counter");
    let run = |receipt: Option<&str>| {
        let mut req = request("", grants(&["storage=1MiB"]));
        req.storage = Some(Box::new(backend.clone()));
        req.receipt = receipt.map(str::to_string);
        agent.run(req)
    };
    let first = run(Some("uid-1"));
    assert_eq!(output(&first), "1");
    let retry = run(Some("uid-1"));
    assert!(retry.storage_conflict, "{retry:?}");
    let mut store = backend.clone();
    let kept = store.receipt("uid-1").expect("read").expect("receipt");
    let kept = ari_runtime::TaskOutcome::from_receipt(&kept).expect("parse");
    // Receipts keep digests, not output bytes (docs/capabilities.md, receipts).
    assert!(kept.output.is_empty() && kept.output_not_kept);
    assert_eq!(kept.output_sha256, first.output_sha256);
    assert_eq!(kept.attestation, first.attestation);
    assert_eq!(
        output(&run(None)),
        "2",
        "the retry must not have incremented"
    );
}

#[test]
fn storage_denied_without_grant() {
    let o = run("counter", "", grants(&[]));
    assert_eq!(
        o.failure_kind(),
        Some(FailureKind::CapabilityDenied),
        "{o:?}"
    );
    assert!(o.output.is_empty());
}

#[test]
fn storage_is_not_committed_when_the_task_fails() {
    // hoarder writes until the quota refuses: the denial fails the task, nothing is committed.
    let backend = MemoryBackend::new();
    let mut req = request("100", grants(&["storage=1KiB"]));
    req.storage = Some(Box::new(backend.clone()));
    let o = agent("hoarder").run(req);
    assert_eq!(o.failure_kind(), Some(FailureKind::CapabilityDenied));
    let mut req = request("hoard/0", grants(&["storage=1MiB"]));
    req.storage = Some(Box::new(backend));
    // counter reads hoard/0: absent, because the failed task committed nothing.
    let o = agent("counter").run(req);
    assert_eq!(output(&o), "1");
}

#[test]
fn randomness_granted_and_denied() {
    let o = run("dice", "5", grants(&["randomness"]));
    assert_eq!(o.failure, None);
    let rolls: Vec<u8> = output(&o)
        .split(' ')
        .map(|r| r.parse().expect("roll"))
        .collect();
    assert_eq!(rolls.len(), 5);
    assert!(rolls.iter().all(|r| (1..=6).contains(r)));
    let o = run("dice", "5", grants(&[]));
    assert_eq!(o.failure_kind(), Some(FailureKind::CapabilityDenied));
}

#[test]
fn signing_granted_and_denied() {
    let dir = tempfile::tempdir().expect("tmp");
    let key_path = dir.path().join("agent.key");
    let agent_key = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
    std::fs::write(&key_path, hex::encode(agent_key.to_bytes())).expect("write key");
    let grant = format!("signing={}", key_path.display());
    let o = run("signer", "message", grants(&[&grant]));
    assert_eq!(o.failure, None, "{o:?}");
    let sig = hex::decode(output(&o)).expect("hex signature");
    let sig = ed25519_dalek::Signature::from_slice(&sig).expect("signature");
    use ed25519_dalek::Verifier;
    assert!(agent_key.verifying_key().verify(b"message", &sig).is_err());
    let signed = ari_runtime::attestation::guest_signed_message(b"message");
    assert!(
        agent_key
            .verifying_key()
            .verify_strict(&signed, &sig)
            .is_ok()
    );
    let o = run("signer", "message", grants(&[]));
    assert_eq!(o.failure_kind(), Some(FailureKind::CapabilityDenied));
}

#[test]
fn time_granted_is_the_logical_clock_via_host_and_wasi() {
    let start = 1_700_000_000_000_000_000u64;
    for input in ["host", "wasi"] {
        let o = run("clock", input, grants(&["timeAccess"]));
        assert_eq!(o.failure, None, "{input}: {o:?}");
        let nanos: u64 = output(&o).parse().expect("nanos");
        assert!(
            (start..start + 1_000_000_000).contains(&nanos),
            "{input}: {nanos} is not the logical clock"
        );
    }
}

#[test]
fn time_denied_without_grant_and_wasi_clock_stands_at_epoch() {
    let o = run("clock", "host", grants(&[]));
    assert_eq!(o.failure_kind(), Some(FailureKind::CapabilityDenied));
    let o = run("clock", "wasi", grants(&[]));
    assert_eq!(o.failure, None);
    assert_eq!(output(&o), "0");
}

#[test]
fn network_granted_fetches_and_meters_bytes() {
    let server = http::Server::start();
    let url = format!("{}/hello", server.base);
    let o = run(
        "fetch",
        &url,
        grants(&[&format!("network={}", server.base)]),
    );
    assert_eq!(o.failure, None, "{o:?}");
    assert_eq!(output(&o), "200\nhello from the test server");
    assert!(o.resources_used.network_bytes > 0);
    assert_eq!(o.trace.events.len(), 1);
}

#[test]
fn network_denied_without_grant() {
    let server = http::Server::start();
    let o = run("fetch", &format!("{}/hello", server.base), grants(&[]));
    assert_eq!(o.failure_kind(), Some(FailureKind::CapabilityDenied));
    assert_eq!(
        server.hits(),
        0,
        "a denied request must not reach the server"
    );
}

#[test]
fn requirement_beyond_grants_fails_before_instantiation() {
    let mut req = request("x", grants(&["timeAccess"]));
    req.requirements = vec![ari_runtime::model::CapabilityName::Network];
    let o = agent("echo").run(req);
    assert_eq!(o.failure_kind(), Some(FailureKind::CapabilityDenied));
    assert_eq!(o.resources_used.fuel, 0, "no instance may run");
}

#[test]
fn input_over_the_limit_is_refused() {
    let mut req = request("0123456789", grants(&[]));
    req.limits.max_input_bytes = 4;
    let o = agent("echo").run(req);
    assert_eq!(o.failure_kind(), Some(FailureKind::HostError));
    assert!(
        o.failure
            .as_ref()
            .is_some_and(|f| f.message.contains("input"))
    );
}

#[test]
fn a_gzip_bomb_response_fails_the_task_after_at_most_the_cap_of_decoded_bytes() {
    let server = http::Server::start();
    let url = format!("{}/bomb", server.base);
    let o = run(
        "fetch",
        &url,
        grants(&[&format!("network={}", server.base)]),
    );
    assert_eq!(o.failure_kind(), Some(FailureKind::HostError), "{o:?}");
    let message = &o.failure.as_ref().expect("failed").message;
    assert!(
        message.contains("exceeds 4194304 bytes (after decoding)"),
        "{message}"
    );
    // Bytes seen: nothing of the 64 MiB reached the trace, the meter or the guest.
    assert!(matches!(
        o.trace.events.as_slice(),
        [ari_runtime::trace::TraceEvent::Http(
            ari_runtime::capability::http::HttpEvent::Error { .. }
        )]
    ));
    assert!(
        o.resources_used.network_bytes < 4096,
        "{:?}",
        o.resources_used
    );
    assert!(
        o.resources_used.memory_bytes < 16 << 20,
        "{:?}",
        o.resources_used
    );
}

#[test]
fn a_slow_server_cannot_hold_a_task_past_its_deadline() {
    // The server answers after 3 s; the task has 1 s. The hop's timeout is cut to what is left
    // of the deadline, so the host call ends at the deadline and the task ends DeadlineExceeded,
    // with the hop recorded as cut by the deadline (not the server's late answer).
    let server = http::Server::start();
    let url = format!("{}/slow", server.base);
    let mut req = request(&url, grants(&[&format!("network={}", server.base)]));
    req.limits.timeout = std::time::Duration::from_secs(1);
    let o = agent("fetch").run(req);
    assert_eq!(
        o.failure_kind(),
        Some(FailureKind::DeadlineExceeded),
        "{o:?}"
    );
    match o.trace.events.as_slice() {
        [
            ari_runtime::trace::TraceEvent::Http(ari_runtime::capability::http::HttpEvent::Error {
                error,
                ..
            }),
        ] => {
            assert_eq!(error, ari_runtime::capability::http::DEADLINE_ERROR)
        }
        other => panic!("expected one hop cut by the deadline, got {other:?}"),
    }
    // The replay ends the same way without the network.
    let report = ari_runtime::RunReport::new(o, url.as_bytes(), &[]);
    let opts = ari_runtime::VerifyOptions {
        accept_embedded_key: true,
        ..Default::default()
    };
    ari_runtime::verify_report(runtime(), &report, &agent_bytes("fetch"), &opts)
        .expect("replay of a deadline-cut hop");
}

/// Issue 26 item 20: cancelling a task blocked in an HTTP call ends it while the call is in
/// flight, not when the server answers or the call's 30 s timeout passes. The server is a bare
/// TCP listener that accepts and never answers (what an overloaded or hostile server does; a
/// real HTTP server would answer), holding the connection until the test is over.
#[test]
fn cancelling_a_task_blocked_in_an_http_call_ends_it_while_the_call_is_in_flight() {
    use std::time::{Duration, Instant};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (accepted_tx, accepted) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let (conn, _) = listener.accept().expect("accept");
        let _ = accepted_tx.send(());
        // Hold the connection, unanswered, until the test lets go.
        let _ = released.recv();
        drop(conn);
    });
    let cancel = ari_runtime::CancelToken::new();
    let grant = format!("network=http://127.0.0.1:{port}");
    let mut req = request(&format!("http://127.0.0.1:{port}/hang"), grants(&[&grant]));
    req.limits.timeout = Duration::from_secs(120);
    req.cancel = Some(cancel.clone());
    let fetch = agent("fetch");
    let run = std::thread::spawn(move || fetch.run(req));
    accepted
        .recv_timeout(Duration::from_secs(60))
        .expect("the request reached the server");
    cancel.cancel();
    // Far below the call's own timeout: only a cancel that reaches the call ends it in time.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !run.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the task is still blocked in its HTTP call 15 s after it was cancelled"
        );
        // A poll interval (the condition is checked each time), not a synchronisation sleep.
        std::thread::park_timeout(Duration::from_millis(20));
    }
    let outcome = run.join().expect("task thread");
    assert_eq!(
        outcome.failure_kind(),
        Some(FailureKind::Cancelled),
        "{:?}",
        outcome.failure
    );
    drop(release);
    server.join().expect("server thread");
}
