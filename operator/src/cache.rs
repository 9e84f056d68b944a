//! What the operator keeps of each watched object.
//!
//! The operator caches every Task of the cluster, so its memory grows with their number. It
//! decides from phase, timings, requirements and the executor's name; it never needs a Task's
//! input, output, attestation or managedFields, nor an executor pod's spec. Dropping them
//! before they are stored keeps the cache to a fraction of the objects' size.
//!
//! Safe because the operator writes only through the `status` subresource (the API server
//! ignores `spec` there) and only for Tasks that are not finished, whose output and
//! attestation do not exist yet; finished Tasks are only ever deleted.
//!
//! Agents the same way (issue 26, item 9): one can reach ≈ 500 KB (32 A2A skills, a 64 KiB
//! config, a `kubectl apply` annotation copying it all), and the operator caches every one. It
//! writes only an Agent's status (a merge patch of `status`), so nothing trimmed is written back.

use ari_crds::{A2aSpec, Agent, Task, TaskPhase};
use k8s_openapi::api::core::v1::Pod;
use sha2::{Digest, Sha256};

pub fn trim_task(t: &mut Task) {
    t.metadata.managed_fields = None;
    // No decision reads a Task's labels or annotations, and their size is the author's choice.
    t.metadata.labels = None;
    t.metadata.annotations = None;
    t.spec.input = None;
    t.spec.input_base64 = None;
    t.spec.items = None;
    if t.is_finished()
        && let Some(s) = t.status.as_mut()
    {
        s.output = None;
        s.output_base64 = None;
        s.attestation = None;
        s.limits_applied = None;
        // A failure's message becomes its Event's note (see task::controller).
        match (s.phase, s.message.as_mut()) {
            (Some(TaskPhase::Failed), Some(m)) => clip(m, crate::task::controller::NOTE_MAX),
            _ => s.message = None,
        }
        s.conditions.clear();
    }
}

/// Keeps what the Agent, Task and Plan decisions read (module, capabilities, limits, executor,
/// mode, status) and the config as its digest, which the executors' spec hash covers (a config
/// change still rolls them; `deployment::spec_hash` hashes the spec as cached). Drops
/// annotations, labels and managedFields (no decision reads them), the description and the
/// A2A card's text (the executors use neither). Of `spec.a2a` only whether the Agent is
/// exposed stays: the operator signs an exposed Agent's card from the Agent read afresh
/// (`agent::controller`), so a few hundred large cards are not kept here.
pub fn trim_agent(a: &mut Agent) {
    a.metadata.managed_fields = None;
    a.metadata.annotations = None;
    a.metadata.labels = None;
    a.spec.description = None;
    a.spec.a2a = a
        .spec
        .a2a
        .take()
        .filter(|card| card.exposed)
        .map(|card| A2aSpec {
            exposed: true,
            public_card: card.public_card,
            ..A2aSpec::default()
        });
    if let Some(config) = a.spec.config.as_mut() {
        *config = format!("sha256:{}", hex::encode(Sha256::digest(config.as_bytes())));
    }
}

/// Shortens `s` to at most `max` bytes, at a character boundary.
pub fn clip(s: &mut String, max: usize) {
    if s.len() > max {
        let cut = (0..=max)
            .rev()
            .find(|i| s.is_char_boundary(*i))
            .unwrap_or(0);
        s.truncate(cut);
    }
}

pub fn trim_pod(p: &mut Pod) {
    p.metadata.managed_fields = None;
    p.metadata.annotations = None;
    p.spec = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Annotation `kubectl apply` leaves with a full copy of the object.
    const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

    fn task(phase: &str) -> Task {
        serde_json::from_value(json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "t", "namespace": "n",
                "annotations": {LAST_APPLIED: "{...}", "keep": "me"}, "labels": {"big": "x"},
                "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": {"agentRef": {"name": "a"}, "input": "x".repeat(10_000), "deadlineSeconds": 9},
            "status": {"phase": phase, "output": "out", "executor": "exec-1",
                "resourcesUsed": {"fuel": 5, "cpuMillis": 1, "memoryBytes": 1, "storageBytes": 0,
                                  "networkBytes": 0, "wallMillis": 2}}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn keeps_what_decisions_and_metrics_read_and_drops_labels_and_annotations() {
        let mut t = task("Succeeded");
        trim_task(&mut t);
        assert!(t.metadata.managed_fields.is_none() && t.spec.input.is_none());
        assert_eq!(t.spec.deadline_seconds, Some(9));
        assert!(t.metadata.annotations.is_none() && t.metadata.labels.is_none());
        let s = t.status.clone().unwrap_or_default();
        assert!(s.output.is_none());
        assert_eq!(s.resources_used.map(|r| r.fuel), Some(5));
        assert_eq!(s.executor.as_deref(), Some("exec-1"));
    }

    /// An Agent at its size bounds: 32 skills, a 64 KiB config, a last-applied annotation.
    fn large_agent(config: &str) -> Agent {
        let skill = |i: usize| {
            json!({"id": format!("s{i}"), "name": "n".repeat(127), "description": "d".repeat(1024),
                   "tags": vec!["t".repeat(63); 16], "examples": vec!["e".repeat(256); 8]})
        };
        serde_json::from_value(json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "generation": 3,
                "annotations": {LAST_APPLIED: "x".repeat(200_000)}, "labels": {"team": "x"},
                "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": {"module": {"configMap": {"name": "m", "key": "k"}},
                     "description": "d".repeat(4096), "mode": "primary", "config": config,
                     "capabilities": {"storage": {"maxBytes": 10},
                                      "delegation": {"agents": ["b"]}},
                     "limits": {"fuel": 7},
                     "a2a": {"exposed": true, "skills": (0..32).map(skill).collect::<Vec<_>>()}},
            "status": {"moduleDigest": "sha256:ab", "attestationPublicKey": "k",
                       "conditions": [{"type": "Ready", "status": "True", "reason": "R",
                                       "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_large_agent_is_cached_small_with_what_decisions_read() {
        let full = large_agent(&"c".repeat(64 << 10));
        let before = serde_json::to_vec(&full).map(|v| v.len()).unwrap_or(0);
        let mut a = full.clone();
        trim_agent(&mut a);
        let after = serde_json::to_vec(&a).map(|v| v.len()).unwrap_or(0);
        assert!(before > 400_000, "{before}");
        assert!(after < 2_000, "trimmed Agent is {after} bytes");
        // What the Agent, Task and Plan decisions read is all there.
        assert_eq!(a.spec.module, full.spec.module);
        assert_eq!(a.spec.capabilities, full.spec.capabilities);
        assert_eq!(a.spec.limits, full.spec.limits);
        assert_eq!(a.spec.executor, full.spec.executor);
        assert_eq!(a.spec.mode, full.spec.mode);
        assert_eq!(a.status, full.status);
        // Whether it is exposed (its card is signed), without the card's text.
        assert_eq!(
            a.spec.a2a,
            Some(A2aSpec {
                exposed: true,
                ..A2aSpec::default()
            })
        );
        assert_eq!(a.metadata.uid, full.metadata.uid);
        assert_eq!(a.metadata.generation, full.metadata.generation);
        assert_eq!(
            ari_crds::plan_view::agent_view(&a),
            ari_crds::plan_view::agent_view(&full)
        );
    }

    #[test]
    fn a_trimmed_agent_still_rolls_its_executors_when_its_config_changes() {
        let hash = |config: &str| {
            let mut a = large_agent(config);
            trim_agent(&mut a);
            crate::agent::deployment::spec_hash(&a)
        };
        assert_eq!(hash("one"), hash("one"));
        assert_ne!(hash("one"), hash("two"));
        // A config that spells the digest of another is not taken for it.
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(b"one")));
        assert_ne!(hash("one"), hash(&digest));
        // The card and the description are the gateway's: changing them, exposing or not,
        // rolls nothing.
        let mut other_card = large_agent("one");
        other_card.spec.a2a = None;
        other_card.spec.description = Some("new".into());
        trim_agent(&mut other_card);
        assert_eq!(
            crate::agent::deployment::spec_hash(&other_card),
            hash("one")
        );
    }

    #[test]
    fn running_tasks_keep_their_status() {
        let mut t = task("Running");
        trim_task(&mut t);
        assert_eq!(
            t.status.and_then(|s| s.output).as_deref(),
            Some("out"),
            "the operator may write this status back"
        );
    }

    #[test]
    fn a_failure_keeps_a_clipped_message_for_its_event() {
        let mut t = task("Failed");
        if let Some(s) = t.status.as_mut() {
            s.message = Some("é".repeat(2_000));
        }
        trim_task(&mut t);
        let m = t.status.and_then(|s| s.message).unwrap_or_default();
        assert!(m.len() <= crate::task::controller::NOTE_MAX && m.starts_with("éé"));
        let mut ok = task("Succeeded");
        if let Some(s) = ok.status.as_mut() {
            s.message = Some("done".into());
        }
        trim_task(&mut ok);
        assert_eq!(ok.status.and_then(|s| s.message), None);
    }
}
