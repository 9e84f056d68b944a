//! Determinism, replay and verification of real runs.
use ari_testkit::runtime as common;

use ari_runtime::capability::storage::MemoryBackend;
use ari_runtime::{FailureKind, RunReport, VerifyError, VerifyOptions, verify_report};
use common::*;

fn counter_run(backend: &MemoryBackend, seed: [u8; 32]) -> ari_runtime::TaskOutcome {
    let mut req = request("", grants(&["storage=1MiB", "randomness", "timeAccess"]));
    req.storage = Some(Box::new(backend.clone()));
    req.seed = Some(seed);
    agent("counter").run(req)
}

#[test]
fn same_input_seed_and_state_give_identical_output_and_trace() {
    let (a, b) = (MemoryBackend::new(), MemoryBackend::new());
    let first = counter_run(&a, [1; 32]);
    let second = counter_run(&b, [1; 32]);
    assert_eq!(first.failure, None);
    assert_eq!(first.output, second.output);
    assert_eq!(first.trace, second.trace);
    assert_eq!(
        first.attestation.predicate().expect("decodes").trace_sha256,
        second
            .attestation
            .predicate()
            .expect("decodes")
            .trace_sha256
    );
    assert_eq!(first.resources_used.fuel, second.resources_used.fuel);

    let d1 = run("dice", "20", grants(&["randomness"]));
    let d2 = run("dice", "20", grants(&["randomness"]));
    assert_eq!(d1.output, d2.output);
    assert_eq!(
        d1.attestation.predicate().expect("decodes").trace_sha256,
        d2.attestation.predicate().expect("decodes").trace_sha256
    );
}

#[test]
fn another_seed_changes_dice() {
    let mut req = request("20", grants(&["randomness"]));
    req.seed = Some([1; 32]);
    let a = agent("dice").run(req);
    let mut req = request("20", grants(&["randomness"]));
    req.seed = Some([2; 32]);
    let b = agent("dice").run(req);
    assert_eq!(a.failure, None);
    assert_ne!(a.output, b.output);
    assert_ne!(
        a.attestation.predicate().expect("decodes").seed,
        b.attestation.predicate().expect("decodes").seed
    );
}

#[test]
fn a_missing_seed_is_generated_and_recorded() {
    let mut req = request("3", grants(&["randomness"]));
    req.seed = None;
    let o = agent("dice").run(req);
    assert_eq!(o.attestation.predicate().expect("decodes").seed.len(), 64);
    assert_ne!(
        o.attestation.predicate().expect("decodes").seed,
        hex::encode([7u8; 32])
    );
}

/// Trusts the embedded key: these tests check replay, not key pinning.
fn embedded() -> VerifyOptions {
    VerifyOptions {
        accept_embedded_key: true,
        ..Default::default()
    }
}

fn report_of(name: &str, input: &str, g: &[&str]) -> (RunReport, Vec<u8>) {
    let o = run(name, input, grants(g));
    (RunReport::new(o, input.as_bytes(), &[]), agent_bytes(name))
}

#[test]
fn replay_reproduces_storage_randomness_time_and_network_runs() {
    let server = http::Server::start();
    let url = format!("{}/hello", server.base);
    let net = format!("network={}", server.base);
    let cases: Vec<(&str, &str, Vec<&str>)> = vec![
        ("counter", "", vec!["storage=1MiB"]),
        ("dice", "7", vec!["randomness"]),
        ("clock", "wasi", vec!["timeAccess"]),
        ("fetch", &url, vec![&net]),
        ("trap", "", vec![]),
    ];
    for (name, input, g) in cases {
        let (report, module) = report_of(name, input, &g);
        let hits = server.hits();
        let replay = verify_report(runtime(), &report, &module, &embedded())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            replay.output_sha256,
            report
                .attestation
                .predicate()
                .expect("decodes")
                .output_sha256,
            "{name}"
        );
        assert_eq!(
            server.hits(),
            hits,
            "{name}: a replay must not touch the network"
        );
    }
}

#[test]
fn tampering_fails_verification_naming_the_check() {
    let (report, module) = report_of("dice", "7", &["randomness"]);
    let opts = embedded();

    let mut t = report.clone();
    t.output = Some("6 6 6 6 6 6 6".into());
    let e = verify_report(runtime(), &t, &module, &opts).expect_err("output tampered");
    assert!(
        e.to_string().starts_with("output digest check failed"),
        "{e}"
    );

    // The envelope's payload re-encoded with another output, the signature kept.
    let mut t = report.clone();
    let mut statement = t.attestation.statement().expect("decodes");
    statement.predicate.output_sha256 = ari_runtime::attestation::sha256_hex(b"6 6 6");
    statement.subject[0].digest.sha256 = statement.predicate.output_sha256.clone();
    t.attestation.payload = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        serde_json::to_vec(&statement).expect("json"),
    );
    let e = verify_report(runtime(), &t, &module, &opts).expect_err("attestation tampered");
    assert!(matches!(e, VerifyError::Signature(_)), "{e}");

    let e = verify_report(runtime(), &report, &agent_bytes("echo"), &opts).expect_err("module");
    assert!(
        e.to_string().starts_with("module digest check failed"),
        "{e}"
    );

    let mut t = report.clone();
    if let Some(ari_runtime::trace::TraceEvent::Random(
        ari_runtime::capability::random::RandomEvent::Bytes { bytes },
    )) = t.trace.events.first_mut()
    {
        bytes[0] ^= 1;
    }
    let e = verify_report(runtime(), &t, &module, &opts).expect_err("trace tampered");
    assert!(
        e.to_string().starts_with("trace digest check failed"),
        "{e}"
    );

    let other = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
    let trusted = VerifyOptions {
        trusted_key: Some(other.verifying_key()),
        ..Default::default()
    };
    let e = verify_report(runtime(), &report, &module, &trusted).expect_err("untrusted key");
    assert!(matches!(e, VerifyError::Signature(_)), "{e}");
}

#[test]
fn a_failed_run_replays_to_the_same_failure() {
    let o = run_with_limits(
        "spin",
        "",
        ari_runtime::Limits {
            fuel: 1_000_000,
            ..Default::default()
        },
    );
    assert_eq!(o.failure_kind(), Some(FailureKind::FuelExhausted));
    let report = RunReport::new(o, b"", &[]);
    verify_report(runtime(), &report, &agent_bytes("spin"), &embedded())
        .expect("replay of a fuel-exhausted run");
}

#[test]
fn verify_refuses_without_a_pinned_key_unless_the_embedded_key_is_accepted() {
    let (report, module) = report_of("dice", "7", &["randomness"]);
    let e = verify_report(runtime(), &report, &module, &VerifyOptions::default())
        .expect_err("no trusted key");
    assert!(matches!(e, VerifyError::NoTrustedKey { .. }), "{e}");
    let key = ari_runtime::attestation::parse_public_key(
        &report.attestation.predicate().expect("decodes").public_key,
    )
    .expect("key");
    let pinned = VerifyOptions {
        trusted_key: Some(key),
        ..Default::default()
    };
    verify_report(runtime(), &report, &module, &pinned).expect("pinned key");
}

#[test]
fn unsigned_report_fields_that_disagree_with_the_signed_ones_fail_verification() {
    let o = run("counter", "", grants(&["storage=1MiB"]));
    let report = RunReport::new(o, b"", &[]);
    let module = agent_bytes("counter");
    verify_report(runtime(), &report, &module, &embedded()).expect("genuine");

    let mut t = report.clone();
    t.limits_applied.storage_max_bytes = Some(2 << 20);
    let e = verify_report(runtime(), &t, &module, &embedded()).expect_err("quota lie");
    assert!(e.to_string().starts_with("limitsApplied"), "{e}");

    let mut t = report.clone();
    t.error = Some(ari_runtime::Failure::new(FailureKind::Trap, "lie"));
    let e = verify_report(runtime(), &t, &module, &embedded()).expect_err("ending lie");
    assert!(e.to_string().starts_with("ending"), "{e}");

    // The replay uses the signed requirements and Task name, not the report's.
    let mut t = report.clone();
    t.requirements = vec![ari_runtime::model::CapabilityName::Signing];
    t.task_id = "other".into();
    verify_report(runtime(), &t, &module, &embedded()).expect("report copies are not used");
}

#[test]
fn the_attestation_states_the_task_ending_limits_and_grants() {
    let mut req = request("", grants(&["storage=1MiB"]));
    req.namespace = Some("team-a".into());
    req.uid = Some("uid-1".into());
    let o = agent("counter").run(req);
    let statement = o.attestation.verify(None).expect("verifies");
    assert_eq!(
        statement.predicate_type,
        "https://ari.dev/attestation/run/v1"
    );
    let a = &statement.predicate;
    assert_eq!(a.task.namespace, "team-a");
    assert_eq!(a.task.uid, "uid-1");
    assert_eq!(a.ending.phase, ari_runtime::model::TaskPhase::Succeeded);
    assert_eq!(a.limits_applied, o.limits_applied);
    assert_eq!(a.limits_applied.storage_max_bytes, Some(1 << 20));
    let o = run("trap", "", grants(&[]));
    assert_eq!(
        o.attestation.predicate().expect("decodes").ending.phase,
        ari_runtime::model::TaskPhase::Failed
    );
    assert_eq!(
        o.attestation.predicate().expect("decodes").ending.reason,
        ari_runtime::model::TaskReason::Trap
    );
}

#[test]
fn a_receipt_keeps_digests_and_the_attestation_never_the_output() {
    let big = "x".repeat(512 << 10);
    let o = run("echo", &big, grants(&[]));
    assert_eq!(o.failure, None);
    let receipt = o.receipt_bytes();
    assert!(receipt.len() < 4096, "receipt is {} bytes", receipt.len());
    let back = ari_runtime::TaskOutcome::from_receipt(&receipt).expect("parses");
    assert!(back.output.is_empty());
    assert!(back.output_not_kept);
    assert_eq!(back.output_sha256, o.output_sha256);
    assert_eq!(back.attestation, o.attestation);
    assert!(back.attestation.verify(None).is_ok());
}
