//! The properties the fuzz targets check, shared with the regression tests
//! (`runtime/tests/fuzz_regressions.rs` includes this file), so every crashing input found by
//! `scripts/fuzz.sh` is replayed by `cargo test` forever after.
//!
//! A check panics when a property fails; anything else (an error for bad input) is fine.

#![allow(dead_code)] // each fuzz target uses one check

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ari_runtime::attestation::{Attestation, parse_public_key, parse_signing_key};
use ari_runtime::capability::Grants;
use ari_runtime::engine::{AllocatorChoice, EngineOptions};
use ari_runtime::model::grant::{GrantSet, NetworkGrant};
use ari_runtime::{Limits, RunReport, Runtime, RuntimeConfig, TaskRequest};
use ed25519_dalek::SigningKey;

/// Input: an allow-list entry, a newline, then URLs one a line. The grammar's own properties
/// are `host_checks::host_pattern`'s; these are the executor's use of it.
///
/// 1. The executor's grants (the Agent's and the CLI's) accept exactly the entries the
///    grammar (`ari_model::hosts`, which the operator validates with) accepts.
/// 2. A URL the executor allows, once normalised, is allowed again and unchanged (what the
///    HTTP client receives is exactly what was checked).
/// 3. The HTTP client's own parser finds the same host and port in that normalised URL, so
///    the connection goes where the check looked.
pub fn allowlist(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (entry, urls) = text.split_once('\n').unwrap_or((text, ""));
    let grammar = ari_runtime::model::hosts::HostPattern::parse(entry);
    let spec = GrantSet {
        network: Some(NetworkGrant {
            allowed_hosts: vec![entry.to_owned()],
            approval: None,
        }),
        ..GrantSet::default()
    };
    let grant = Grants::load(spec, None);
    assert_eq!(
        grant.is_ok(),
        grammar.is_ok(),
        "entry {entry:?}: executor {grant:?}, grammar {grammar:?}"
    );
    // The CLI path parses the same grammar (after trimming what the user typed).
    assert_eq!(
        Grants::parse_cli(&[format!("network={entry}")]).is_ok(),
        ari_runtime::model::hosts::HostPattern::parse(entry.trim()).is_ok(),
        "entry {entry:?}: the CLI and the grammar disagree"
    );
    let Ok(grant) = grant else {
        return;
    };
    let Some(list) = grant.hosts() else {
        panic!("entry {entry:?}: a network grant without its allow-list");
    };
    for raw in urls.split('\n').take(8) {
        let allowed = list.check(raw);
        let Ok(parsed) = allowed else {
            continue;
        };
        let again = list
            .check(parsed.as_str())
            .unwrap_or_else(|e| panic!("normalised {parsed} of {raw:?} is denied: {e}"));
        assert_eq!(again, parsed, "normalising {raw:?} is not idempotent");
        if let Ok(uri) = parsed.as_str().parse::<ureq::http::Uri>() {
            let host = uri.host().unwrap_or_default();
            assert!(
                host.eq_ignore_ascii_case(parsed.host_str().unwrap_or_default()),
                "{raw:?}: the client would connect to {host:?}, the check saw {:?}",
                parsed.host_str()
            );
            let default = if uri.scheme_str() == Some("https") {
                443
            } else {
                80
            };
            assert_eq!(
                uri.port_u16().unwrap_or(default),
                parsed.port_or_known_default().unwrap_or_default(),
                "{raw:?}: the client would use another port"
            );
        }
    }
}

/// A genuine attestation and the key that signed it.
fn genuine() -> &'static (Attestation, SigningKey) {
    static GENUINE: OnceLock<(Attestation, SigningKey)> = OnceLock::new();
    GENUINE.get_or_init(|| {
        let key = SigningKey::from_bytes(&[7; 32]);
        let claims = ari_runtime::attestation::Claims {
            task: ari_runtime::attestation::TaskIdentity {
                namespace: "team-a".into(),
                name: "t-1".into(),
                uid: "0f0f-uid".into(),
            },
            module_sha256: "ab".repeat(32),
            input_sha256: "cd".repeat(32),
            config_sha256: "ef".repeat(32),
            requirements: vec![
                ari_runtime::model::CapabilityName::Network,
                ari_runtime::model::CapabilityName::Storage,
            ],
            seed: [1; 32],
            limits_applied: ari_runtime::LimitsApplied {
                fuel: 1_000_000,
                memory_bytes: 16 << 20,
                timeout_millis: 30_000,
                max_output_bytes: 1 << 20,
                max_input_bytes: 1 << 20,
                capabilities: vec![
                    ari_runtime::model::CapabilityName::Network,
                    ari_runtime::model::CapabilityName::Storage,
                ],
                storage_max_bytes: Some(4096),
                allowed_hosts: vec!["https://example.com".into()],
                delegation: None,
                ..Default::default()
            },
            failure: Some(ari_runtime::FailureKind::Trap),
            output_sha256: "ef".repeat(32),
            resources_used: ari_runtime::ResourcesUsed {
                fuel: 12345,
                cpu_millis: 3,
                memory_bytes: 1 << 20,
                storage_bytes: 0,
                network_bytes: 0,
                wall_millis: 4,
                children_fuel: 0,
                ..Default::default()
            },
            models: Vec::new(),
            children: Vec::new(),
            approvals: Vec::new(),
            input_required: false,
            conversation: None,
            trace_sha256: [2; 32],
            executor: "pod-\"a\"\\é".into(),
        };
        (Attestation::sign(claims, &key), key)
    })
}

/// Input: arbitrary bytes, read as an attestation / report / key, and as edits to a genuine
/// attestation's JSON.
///
/// 1. Decoding and verifying never panic; a decoded envelope round-trips through JSON.
/// 2. An edited envelope that still verifies under the genuine key carries exactly the genuine
///    payload bytes, so it states exactly the genuine claims.
pub fn attestation(data: &[u8]) {
    if let Ok(att) = serde_json::from_slice::<Attestation>(data) {
        let _ = att.verify(None);
        let _ = att.statement();
        let _ = att.sha256();
        let json = serde_json::to_vec(&att).expect("serialize");
        let back: Attestation = serde_json::from_slice(&json).expect("round trip");
        assert_eq!(back, att);
    }
    if let Ok(report) = serde_json::from_slice::<RunReport>(data) {
        let _ = report.input_bytes();
        let _ = report.output_bytes();
        let _ = report.attestation.verify(None);
        let _ = report.trace.sha256();
    }
    let _ = parse_signing_key(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_public_key(text);
    }

    let (genuine, key) = genuine();
    let mut json = serde_json::to_vec(genuine).expect("serialize");
    for edit in data.chunks_exact(3) {
        let at = usize::from(u16::from_le_bytes([edit[0], edit[1]])) % json.len();
        json[at] = edit[2];
    }
    if let Ok(att) = serde_json::from_slice::<Attestation>(&json)
        && att.verify(Some(&key.verifying_key())).is_ok()
    {
        assert_eq!(
            att.payload_bytes(),
            genuine.payload_bytes(),
            "an edited attestation verified with other claims"
        );
    }
}

fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Runtime::new(RuntimeConfig {
            cache_dir: None,
            engine: EngineOptions {
                allocator: AllocatorChoice::OnDemand,
                ..EngineOptions::default()
            },
        })
        .expect("runtime")
    })
}

/// Input: the bytes of a would-be agent component.
///
/// `Runtime::load` returns a classified error or an agent, never panics; an agent that loads
/// runs one small task to a classified ending with a verifiable attestation.
pub fn load(data: &[u8]) {
    let Ok(agent) = runtime().load(data) else {
        return;
    };
    static KEY: OnceLock<Arc<SigningKey>> = OnceLock::new();
    let key = KEY.get_or_init(|| Arc::new(SigningKey::from_bytes(&[9; 32])));
    let mut req = TaskRequest::new("fuzz", b"fuzz".to_vec(), key.clone());
    req.limits = Limits {
        fuel: 2_000_000,
        memory_bytes: 16 << 20,
        timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    req.seed = Some([0; 32]);
    req.start_unix_nanos = Some(0);
    let outcome = agent.run(req);
    assert!(outcome.attestation.verify(None).is_ok());
    assert!(outcome.succeeded() || outcome.output.is_empty());
}
