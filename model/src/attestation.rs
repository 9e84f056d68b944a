//! Signed attestations: what ran (module, input, Task identity), how it was bounded (limits and
//! grants), how it ended (phase and reason) and what it produced, signed by the executor.
//!
//! Signed message (format `ari.dev/attestation/v3`): DSSE's pre-authentication encoding
//! `"DSSEv1" SP len(type) SP type SP len(body) SP body` with type [`PAYLOAD_TYPE`] and `body`
//! the UTF-8 bytes of the compact JSON object of every field except `signature`, keys in the
//! order of [`Attestation`] and no whitespace. Numbers are unsigned decimal integers; strings are
//! escaped as serde_json does (only `"`, `\` and control characters); digests, the seed, the
//! public key and the signature are lowercase hex. Lengths are ASCII decimal byte counts.
//!
//! Guest signatures (`sign` host call) cover [`GUEST_SIGNATURE_CONTEXT`] ‖ data instead, which
//! never starts with `DSSEv1`: no guest signature is an attestation signature, and no attestation
//! signature verifies as a guest signature.

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::capability::CapabilityName;
use crate::limits::LimitsApplied;
use crate::outcome::{FailureKind, TaskPhase, TaskReason};
use crate::usage::{ModelCalls, ResourcesUsed};

/// The `format` value of this version. v3 added `configSha256` (the Agent's `spec.config`).
pub const FORMAT: &str = "ari.dev/attestation/v3";

/// Formats earlier releases signed: their signed bodies lack fields this version checks (v2:
/// the config digest), so they are refused with a message that says so.
pub const OLD_FORMATS: &[&str] = &["ari.dev/attestation/v1", "ari.dev/attestation/v2"];

/// The DSSE payload type the attestation signature is bound to.
pub const PAYLOAD_TYPE: &str = "application/vnd.ari.attestation.v3+json";

/// What a guest `sign` call prepends to the guest's data before signing (and `verify` before
/// verifying): keeps guest signatures out of the attestation message space.
pub const GUEST_SIGNATURE_CONTEXT: &[u8] = b"ari.dev/guest-signature/v1\0";

/// The message a guest signature covers: [`GUEST_SIGNATURE_CONTEXT`] ‖ `data`.
pub fn guest_signed_message(data: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(GUEST_SIGNATURE_CONTEXT.len() + data.len());
    msg.extend_from_slice(GUEST_SIGNATURE_CONTEXT);
    msg.extend_from_slice(data);
    msg
}

/// DSSE v1 pre-authentication encoding of `body` under `payload_type`.
pub fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Which Task the run was for; empty strings where the runner did not know (`ari run` has no
/// namespace or UID).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TaskIdentity {
    pub namespace: String,
    /// Also the `task-spec.id` the guest saw.
    pub name: String,
    pub uid: String,
}

/// How the run ended: `Succeeded`/`Completed`, or `Failed` and the failure class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Ending {
    pub phase: TaskPhase,
    pub reason: TaskReason,
}

impl Ending {
    pub fn of(failure: Option<FailureKind>) -> Self {
        match failure {
            None => Ending {
                phase: TaskPhase::Succeeded,
                reason: TaskReason::Completed,
            },
            Some(FailureKind::Cancelled) => Ending {
                phase: TaskPhase::Cancelled,
                reason: TaskReason::Cancelled,
            },
            Some(kind) => Ending {
                phase: TaskPhase::Failed,
                reason: kind.into(),
            },
        }
    }

    /// The failure class this ending names (`None` for success); `Err` for an ending no run
    /// can have (a pending phase, or `ExecutorLost`, which only the operator decides).
    pub fn failure_kind(&self) -> Result<Option<FailureKind>, String> {
        match (self.phase, self.reason) {
            (TaskPhase::Succeeded, TaskReason::Completed) => Ok(None),
            (TaskPhase::Cancelled, TaskReason::Cancelled) => Ok(Some(FailureKind::Cancelled)),
            (TaskPhase::Failed, reason) => reason
                .failure_kind()
                .map(Some)
                .ok_or_else(|| format!("{reason} is not a failure a run can end with")),
            (phase, reason) => Err(format!("no run ends {phase}/{reason}")),
        }
    }
}

/// Signed, replayable record of a run (format `ari.dev/attestation/v3`): `signature` is Ed25519
/// over the DSSE pre-authentication encoding of the canonical JSON of the other fields, in this
/// order (docs/runtime.md).
// Field order here *is* the signed encoding (see the module docs); do not reorder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Attestation {
    pub format: String,
    pub task: TaskIdentity,
    pub module_sha256: String,
    pub input_sha256: String,
    /// SHA-256 of the config handed to the guest's `initialize` (the Agent's `spec.config`;
    /// of no bytes when there is none): the config changes behaviour, so it is signed, and a
    /// replay needs it. Defaults when absent so an old-format document is refused by its
    /// `format`, not as malformed.
    #[serde(default)]
    pub config_sha256: String,
    /// Capabilities the Task required (the guest sees them; replay needs them).
    #[serde(default)]
    pub requirements: Vec<CapabilityName>,
    /// The PRNG seed (hex, 32 bytes) the task ran with.
    pub seed: String,
    /// The limits and grants enforced: everything a replay needs to run under the same bounds.
    pub limits_applied: LimitsApplied,
    pub ending: Ending,
    pub output_sha256: String,
    pub resources_used: ResourcesUsed,
    /// Each model the run called: its name, the endpoint and model id that answered, its
    /// calls and tokens. Absent when it called none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelCalls>,
    /// Digest of the recorded host-call trace.
    pub trace_sha256: String,
    /// Who ran it (pod or host name).
    pub executor: String,
    /// Ed25519 verifying key (hex, 32 bytes).
    pub public_key: String,
    /// Ed25519 signature (hex, 64 bytes) over [`Attestation::signed_message`].
    pub signature: String,
}

/// The signed part, in canonical order. Must list the fields of [`Attestation`] in its order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    format: &'a str,
    task: &'a TaskIdentity,
    module_sha256: &'a str,
    input_sha256: &'a str,
    config_sha256: &'a str,
    requirements: &'a [CapabilityName],
    seed: &'a str,
    limits_applied: &'a LimitsApplied,
    ending: &'a Ending,
    output_sha256: &'a str,
    resources_used: &'a ResourcesUsed,
    #[serde(skip_serializing_if = "<[ModelCalls]>::is_empty")]
    models: &'a [ModelCalls],
    trace_sha256: &'a str,
    executor: &'a str,
    public_key: &'a str,
}

/// What an attestation states, before signing.
#[derive(Debug, Clone)]
pub struct Claims {
    pub task: TaskIdentity,
    pub module_sha256: String,
    pub input_sha256: String,
    pub config_sha256: String,
    pub requirements: Vec<CapabilityName>,
    pub seed: [u8; 32],
    pub limits_applied: LimitsApplied,
    pub failure: Option<FailureKind>,
    pub output_sha256: String,
    pub resources_used: ResourcesUsed,
    pub models: Vec<ModelCalls>,
    pub trace_sha256: [u8; 32],
    pub executor: String,
}

/// Why an attestation does not verify.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AttestationError {
    #[error("unsupported attestation format {0:?} (expected {FORMAT:?})")]
    Format(String),
    #[error(
        "attestation format {0:?} is from an earlier ari release: it does not sign the Agent's \
         config, which {FORMAT:?} does; verify it with the `ari verify` of the release that \
         made it, or run the task again"
    )]
    OldFormat(String),
    #[error("public key is not a valid Ed25519 key: {0}")]
    PublicKey(String),
    #[error("signature is malformed: {0}")]
    SignatureEncoding(String),
    #[error("signature does not match the attestation contents (tampered or wrong key)")]
    BadSignature,
    #[error("attestation is signed by {actual}, not the trusted key {expected}")]
    UntrustedKey { expected: String, actual: String },
}

impl Attestation {
    /// Signs `claims` with `key`.
    pub fn sign(claims: Claims, key: &SigningKey) -> Self {
        let mut att = Attestation {
            format: FORMAT.to_string(),
            task: claims.task,
            module_sha256: claims.module_sha256,
            input_sha256: claims.input_sha256,
            config_sha256: claims.config_sha256,
            requirements: claims.requirements,
            seed: hex::encode(claims.seed),
            limits_applied: claims.limits_applied,
            ending: Ending::of(claims.failure),
            output_sha256: claims.output_sha256,
            resources_used: claims.resources_used,
            models: claims.models,
            trace_sha256: hex::encode(claims.trace_sha256),
            executor: claims.executor,
            public_key: hex::encode(key.verifying_key().as_bytes()),
            signature: String::new(),
        };
        att.signature = hex::encode(key.sign(&att.signed_message()).to_bytes());
        att
    }

    /// The canonical JSON body (every field but `signature`; see the module docs).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let body = Body {
            format: &self.format,
            task: &self.task,
            module_sha256: &self.module_sha256,
            input_sha256: &self.input_sha256,
            config_sha256: &self.config_sha256,
            requirements: &self.requirements,
            seed: &self.seed,
            limits_applied: &self.limits_applied,
            ending: &self.ending,
            output_sha256: &self.output_sha256,
            resources_used: &self.resources_used,
            models: &self.models,
            trace_sha256: &self.trace_sha256,
            executor: &self.executor,
            public_key: &self.public_key,
        };
        // Serializing plain strings, integers and lists cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The digest by which others refer to this attestation (a parent's trace names its
    /// children's): hex SHA-256 of the signed message followed by the signature's hex text, so
    /// it changes with any signed field and with the signature.
    pub fn sha256(&self) -> String {
        let mut bytes = self.signed_message();
        bytes.extend_from_slice(self.signature.as_bytes());
        sha256_hex(&bytes)
    }

    /// The bytes the signature covers: PAE([`PAYLOAD_TYPE`], canonical body).
    pub fn signed_message(&self) -> Vec<u8> {
        pae(PAYLOAD_TYPE, &self.canonical_bytes())
    }

    /// Checks the format and the signature (strict Ed25519: no small-order keys, canonical
    /// `s`) against the embedded public key, and, when `trusted` is given, that the embedded
    /// key is that one.
    pub fn verify_signature(&self, trusted: Option<&VerifyingKey>) -> Result<(), AttestationError> {
        if OLD_FORMATS.contains(&self.format.as_str()) {
            return Err(AttestationError::OldFormat(self.format.clone()));
        }
        if self.format != FORMAT {
            return Err(AttestationError::Format(self.format.clone()));
        }
        let key = parse_public_key(&self.public_key)?;
        if let Some(trusted) = trusted
            && trusted != &key
        {
            return Err(AttestationError::UntrustedKey {
                expected: hex::encode(trusted.as_bytes()),
                actual: self.public_key.clone(),
            });
        }
        let sig_bytes = hex::decode(&self.signature)
            .map_err(|e| AttestationError::SignatureEncoding(e.to_string()))?;
        let sig = Signature::from_slice(&sig_bytes)
            .map_err(|e| AttestationError::SignatureEncoding(e.to_string()))?;
        key.verify_strict(&self.signed_message(), &sig)
            .map_err(|_| AttestationError::BadSignature)
    }
}

/// Parses a hex Ed25519 public key.
pub fn parse_public_key(hex_key: &str) -> Result<VerifyingKey, AttestationError> {
    let bytes =
        hex::decode(hex_key.trim()).map_err(|e| AttestationError::PublicKey(e.to_string()))?;
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|_| AttestationError::PublicKey("expected 32 bytes".into()))?;
    VerifyingKey::from_bytes(&arr).map_err(|e| AttestationError::PublicKey(e.to_string()))
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            task: TaskIdentity {
                namespace: "team-a".into(),
                name: "t1".into(),
                uid: "0000-1111".into(),
            },
            module_sha256: sha256_hex(b"module"),
            input_sha256: sha256_hex(b"in"),
            config_sha256: sha256_hex(b"cfg"),
            requirements: vec![CapabilityName::Storage],
            seed: [7; 32],
            limits_applied: LimitsApplied {
                fuel: 1000,
                memory_bytes: 1 << 20,
                timeout_millis: 5000,
                max_output_bytes: 100,
                max_input_bytes: 100,
                capabilities: vec![CapabilityName::Network, CapabilityName::Storage],
                storage_max_bytes: Some(4096),
                allowed_hosts: vec!["https://example.com".into()],
                delegation: None,
                ..Default::default()
            },
            failure: None,
            output_sha256: sha256_hex(b"out"),
            resources_used: ResourcesUsed {
                fuel: 42,
                ..Default::default()
            },
            models: Vec::new(),
            trace_sha256: [1; 32],
            executor: "test \"pod\"".into(),
        }
    }

    #[test]
    fn signed_attestation_verifies_and_tampering_fails() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let att = Attestation::sign(claims(), &key);
        assert_eq!(att.verify_signature(None), Ok(()));
        assert_eq!(att.verify_signature(Some(&key.verifying_key())), Ok(()));

        let mut tampered = att.clone();
        tampered.output_sha256 = sha256_hex(b"other");
        assert_eq!(
            tampered.verify_signature(None),
            Err(AttestationError::BadSignature)
        );

        let mut fuel = att.clone();
        fuel.resources_used.fuel += 1;
        assert_eq!(
            fuel.verify_signature(None),
            Err(AttestationError::BadSignature)
        );

        let other = SigningKey::from_bytes(&[4; 32]);
        assert!(matches!(
            att.verify_signature(Some(&other.verifying_key())),
            Err(AttestationError::UntrustedKey { .. })
        ));
    }

    /// A named edit of an attestation.
    type Edit = (&'static str, Box<dyn Fn(&mut Attestation)>);

    #[test]
    fn ending_limits_grants_and_task_identity_are_signed() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let att = Attestation::sign(claims(), &key);
        let edits: Vec<Edit> = vec![
            (
                "phase",
                Box::new(|a: &mut Attestation| a.ending = Ending::of(Some(FailureKind::Trap))),
            ),
            (
                "namespace",
                Box::new(|a: &mut Attestation| a.task.namespace = "team-b".into()),
            ),
            (
                "name",
                Box::new(|a: &mut Attestation| a.task.name = "t2".into()),
            ),
            (
                "uid",
                Box::new(|a: &mut Attestation| a.task.uid = "2222".into()),
            ),
            (
                "fuel limit",
                Box::new(|a: &mut Attestation| a.limits_applied.fuel += 1),
            ),
            (
                "memory",
                Box::new(|a: &mut Attestation| a.limits_applied.memory_bytes += 1),
            ),
            (
                "timeout",
                Box::new(|a: &mut Attestation| a.limits_applied.timeout_millis += 1),
            ),
            (
                "output cap",
                Box::new(|a: &mut Attestation| a.limits_applied.max_output_bytes += 1),
            ),
            (
                "input cap",
                Box::new(|a: &mut Attestation| a.limits_applied.max_input_bytes += 1),
            ),
            (
                "grants",
                Box::new(|a: &mut Attestation| {
                    a.limits_applied.capabilities.push(CapabilityName::Signing)
                }),
            ),
            (
                "quota",
                Box::new(|a: &mut Attestation| a.limits_applied.storage_max_bytes = None),
            ),
            (
                "hosts",
                Box::new(|a: &mut Attestation| {
                    a.limits_applied.allowed_hosts.push("https://evil".into())
                }),
            ),
            (
                "requirements",
                Box::new(|a: &mut Attestation| a.requirements.clear()),
            ),
            (
                "config",
                Box::new(|a: &mut Attestation| a.config_sha256 = sha256_hex(b"other config")),
            ),
        ];
        for (what, edit) in edits {
            let mut edited = att.clone();
            edit(&mut edited);
            assert_eq!(
                edited.verify_signature(None),
                Err(AttestationError::BadSignature),
                "{what} is not covered by the signature"
            );
        }
    }

    #[test]
    fn signed_message_is_dsse_pae_of_the_canonical_body() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let att = Attestation::sign(claims(), &key);
        let body = att.canonical_bytes();
        let text = String::from_utf8(body.clone()).expect("utf8");
        assert!(text.starts_with(
            "{\"format\":\"ari.dev/attestation/v3\",\"task\":{\"namespace\":\"team-a\","
        ));
        assert!(text.contains(&format!(
            "\"inputSha256\":\"{}\",\"configSha256\":\"{}\",\"requirements\":",
            sha256_hex(b"in"),
            sha256_hex(b"cfg")
        )));
        assert!(text.contains("\"ending\":{\"phase\":\"Succeeded\",\"reason\":\"Completed\"}"));
        assert!(text.contains("\"resourcesUsed\":{\"fuel\":42,\"cpuMillis\":0,"));
        assert!(text.ends_with(&format!("\"publicKey\":\"{}\"}}", att.public_key)));
        assert!(!text.contains("signature"));
        assert!(!text.contains(": "));
        let mut want = format!(
            "DSSEv1 {} {PAYLOAD_TYPE} {} ",
            PAYLOAD_TYPE.len(),
            body.len()
        )
        .into_bytes();
        want.extend_from_slice(&body);
        assert_eq!(att.signed_message(), want);
    }

    #[test]
    fn an_old_format_document_parses_and_is_refused_by_its_format() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let mut json = serde_json::to_value(Attestation::sign(claims(), &key)).expect("json");
        json["format"] = "ari.dev/attestation/v2".into();
        if let Some(o) = json.as_object_mut() {
            o.remove("configSha256");
        }
        let old: Attestation = serde_json::from_value(json).expect("a v2 document parses");
        let err = old.verify_signature(None).expect_err("v2 is refused");
        assert_eq!(
            err,
            AttestationError::OldFormat("ari.dev/attestation/v2".into())
        );
        assert!(err.to_string().contains("earlier ari release"), "{err}");
        let mut other = Attestation::sign(claims(), &key);
        other.format = "something/else".into();
        assert!(matches!(
            other.verify_signature(None),
            Err(AttestationError::Format(_))
        ));
    }

    /// Pins the signed encoding: a change here changes every signature, so it must come with
    /// a new [`FORMAT`] (and this digest updated on purpose).
    #[test]
    fn the_signed_message_of_fixed_claims_is_pinned() {
        let att = Attestation::sign(claims(), &SigningKey::from_bytes(&[3; 32]));
        assert_eq!(sha256_hex(&att.signed_message()), PINNED_SIGNED_MESSAGE);
    }

    const PINNED_SIGNED_MESSAGE: &str =
        "c2c7a8e535f8d720fbf028a95779673943b90353c473671e397a14bd61a180b2";

    #[test]
    fn a_small_order_key_with_a_trivial_signature_is_refused() {
        // With the identity point as key and R = identity, s = 0, cofactorless non-strict
        // verification accepts any message; strict verification refuses weak keys.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let mut att = Attestation::sign(claims(), &SigningKey::from_bytes(&[3; 32]));
        att.public_key = hex::encode(identity);
        let mut sig = [0u8; 64];
        sig[0] = 1;
        att.signature = hex::encode(sig);
        let key = VerifyingKey::from_bytes(&identity).expect("decodes");
        assert!(
            ed25519_dalek::Verifier::verify(
                &key,
                &att.signed_message(),
                &Signature::from_bytes(&sig)
            )
            .is_ok(),
            "non-strict verification accepts the trivial forgery"
        );
        assert_eq!(
            att.verify_signature(None),
            Err(AttestationError::BadSignature)
        );
    }
}
