//! Signed attestations: a DSSE envelope (payload type [`PAYLOAD_TYPE`]) holding an in-toto
//! Statement v1 whose predicate ([`PREDICATE_TYPE`], a [`RunPredicate`]) says what ran (module,
//! input, config, Task identity), how it was bounded (limits and grants, model endpoints and
//! tool servers included), how it ended, what it produced and used, the children it awaited and
//! the trace it consumed. Any DSSE verifier checks it with the Agent's public key
//! (`securesystemslib`, the `dsse` crate, in-toto's tools).
//!
//! - Signature: Ed25519 over DSSE's pre-authentication encoding
//!   `"DSSEv1" SP len(type) SP type SP len(payload) SP payload` of the payload bytes as carried
//!   (base64-decoded, never re-encoded), base64 in the envelope.
//! - `keyid`: lowercase hex SHA-256 of the raw 32-byte Ed25519 public key ([`keyid`]).
//! - Digest (how a parent's trace, a Plan or an A2A answer names an attestation): lowercase hex
//!   SHA-256 of the envelope's RFC 8785 canonical JSON, keys sorted and no whitespace, which for
//!   its ASCII-only fields is `jq -cjS . envelope.json | sha256sum` ([`Attestation::sha256`]).
//!
//! Guest signatures (`sign` host call) cover [`GUEST_SIGNATURE_CONTEXT`] ‖ data instead, which
//! never starts with `DSSEv1`: no guest signature is an attestation signature, and no attestation
//! signature verifies as a guest signature.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::approval::ApprovalRecord;
use crate::capability::CapabilityName;
use crate::conversation::ConversationLink;
use crate::limits::LimitsApplied;
use crate::outcome::{FailureKind, TaskPhase, TaskReason};
use crate::usage::{ModelCalls, ResourcesUsed};

/// The DSSE payload type: an in-toto Statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// The in-toto Statement version the payload is.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// ari's predicate type for one run (docs/verification.md describes its fields).
pub const PREDICATE_TYPE: &str = "https://ari.dev/attestation/run/v1";

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
    use std::io::Write as _;
    // One allocation: "DSSEv1", two lengths and four spaces are under 64 bytes.
    let mut out = Vec::with_capacity(64 + payload_type.len() + body.len());
    // Writing to a Vec cannot fail.
    let _ = write!(
        out,
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        body.len()
    );
    out.extend_from_slice(body);
    out
}

/// The `keyid` an envelope signature by `key` carries: hex SHA-256 of its 32 raw bytes.
pub fn keyid(key: &VerifyingKey) -> String {
    sha256_hex(key.as_bytes())
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
    /// How a run ended: its failure, else whether the guest ended its turn asking for input.
    pub fn of(failure: Option<FailureKind>, input_required: bool) -> Self {
        match failure {
            None if input_required => Ending {
                phase: TaskPhase::Succeeded,
                reason: TaskReason::InputRequired,
            },
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
            (TaskPhase::Succeeded, TaskReason::Completed | TaskReason::InputRequired) => Ok(None),
            (TaskPhase::Cancelled, TaskReason::Cancelled) => Ok(Some(FailureKind::Cancelled)),
            (TaskPhase::Failed, reason) => reason
                .failure_kind()
                .map(Some)
                .ok_or_else(|| format!("{reason} is not a failure a run can end with")),
            (phase, reason) => Err(format!("no run ends {phase}/{reason}")),
        }
    }
}

/// A run's signed attestation: a DSSE envelope holding an in-toto Statement (predicate type
/// `https://ari.dev/attestation/run/v1`), checked by any DSSE verifier with the Agent's
/// `status.attestationPublicKey` (docs/verification.md).
// Fields are declared in sorted order, so the compact JSON is canonical (`Attestation::sha256`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Attestation {
    /// Base64 (standard, padded) of the in-toto Statement's JSON bytes, as signed.
    pub payload: String,
    /// `application/vnd.in-toto+json`.
    pub payload_type: String,
    pub signatures: Vec<EnvelopeSignature>,
}

/// One DSSE signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EnvelopeSignature {
    /// Hex SHA-256 of the signer's raw Ed25519 public key.
    pub keyid: String,
    /// Base64 of the 64-byte Ed25519 signature over the payload's pre-authentication encoding.
    pub sig: String,
}

/// An in-toto Statement v1 about one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Statement {
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// The output's digest (name `output`) and the module's (name `module`).
    pub subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: RunPredicate,
}

/// An in-toto resource descriptor named by its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    pub name: String,
    pub digest: SubjectDigest,
}

/// An in-toto digest set; ari names every artifact by SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubjectDigest {
    pub sha256: String,
}

/// A child the run awaited to its end, by its own attestation's digest: a tree verifies whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildAttestation {
    pub agent: String,
    pub task: String,
    pub attestation_sha256: String,
}

/// The predicate of ari's run Statement: everything a replay needs and everything the run
/// claims. Verification checks the payload's bytes as carried, never a re-encoding of this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunPredicate {
    pub task: TaskIdentity,
    pub module_sha256: String,
    pub input_sha256: String,
    /// SHA-256 of the config handed to the guest's `initialize` (the Agent's `spec.config`;
    /// of no bytes when there is none): it changes behaviour, and a replay needs it.
    pub config_sha256: String,
    /// Capabilities the Task required (the guest sees them; replay needs them).
    #[serde(default)]
    pub requirements: Vec<CapabilityName>,
    /// The PRNG seed (hex, 32 bytes) the task ran with.
    pub seed: String,
    /// The limits and grants enforced, model endpoints and tool servers included: everything
    /// a replay needs to run under the same bounds.
    pub limits_applied: LimitsApplied,
    pub ending: Ending,
    pub output_sha256: String,
    pub resources_used: ResourcesUsed,
    /// Each model the run called: its name, the endpoint and model id that answered, its
    /// calls and tokens. Absent when it called none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelCalls>,
    /// The children it awaited to their end, in the order they were started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildAttestation>,
    /// Each call that waited for a person: who decided what, when, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalRecord>,
    /// For a turn that continues a conversation: the turn before it and its attestation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationLink>,
    /// Digest of the recorded host-call trace.
    pub trace_sha256: String,
    /// Who ran it (pod or host name).
    pub executor: String,
    /// The signer's Ed25519 public key (hex, 32 bytes), which `ari run`'s self-signed reports
    /// are checked against when no key is trusted.
    pub public_key: String,
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
    pub children: Vec<ChildAttestation>,
    pub approvals: Vec<ApprovalRecord>,
    /// The guest ended its turn asking for input (it succeeded, and called `ask-for-input`).
    pub input_required: bool,
    pub conversation: Option<ConversationLink>,
    pub trace_sha256: [u8; 32],
    pub executor: String,
}

/// Why an attestation does not verify.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AttestationError {
    #[error("the envelope's payload type is {0:?}, not {PAYLOAD_TYPE:?}")]
    PayloadType(String),
    #[error("the envelope is malformed: {0}")]
    Encoding(String),
    #[error("the payload is not an ari run Statement: {0}")]
    Statement(String),
    #[error("public key is not a valid Ed25519 key: {0}")]
    PublicKey(String),
    #[error("the envelope has no signature by key {keyid}")]
    NoSignature { keyid: String },
    #[error("signature does not match the attestation contents (tampered or wrong key)")]
    BadSignature,
    #[error("attestation is signed by {actual}, not the trusted key {expected}")]
    UntrustedKey { expected: String, actual: String },
}

impl Statement {
    fn of(claims: Claims, key: &VerifyingKey) -> Self {
        Statement {
            statement_type: STATEMENT_TYPE.into(),
            subject: Subject::of(&claims.output_sha256, &claims.module_sha256),
            predicate_type: PREDICATE_TYPE.into(),
            predicate: RunPredicate {
                task: claims.task,
                module_sha256: claims.module_sha256,
                input_sha256: claims.input_sha256,
                config_sha256: claims.config_sha256,
                requirements: claims.requirements,
                seed: hex_lower(&claims.seed),
                limits_applied: claims.limits_applied,
                ending: Ending::of(claims.failure, claims.input_required),
                output_sha256: claims.output_sha256,
                resources_used: claims.resources_used,
                models: claims.models,
                children: claims.children,
                approvals: claims.approvals,
                conversation: claims.conversation,
                trace_sha256: hex_lower(&claims.trace_sha256),
                executor: claims.executor,
                public_key: hex_lower(key.as_bytes()),
            },
        }
    }

    /// The types are in-toto's and ari's, and the subjects are the predicate's digests.
    fn check(&self) -> Result<(), AttestationError> {
        if self.statement_type != STATEMENT_TYPE {
            return Err(AttestationError::Statement(format!(
                "_type is {:?}, not {STATEMENT_TYPE:?}",
                self.statement_type
            )));
        }
        if self.predicate_type != PREDICATE_TYPE {
            return Err(AttestationError::Statement(format!(
                "predicateType is {:?}, not {PREDICATE_TYPE:?}",
                self.predicate_type
            )));
        }
        let p = &self.predicate;
        if self.subject != Subject::of(&p.output_sha256, &p.module_sha256) {
            return Err(AttestationError::Statement(
                "its subjects are not the predicate's output and module digests".into(),
            ));
        }
        Ok(())
    }
}

impl Subject {
    /// The subjects of a run: its output and its module.
    fn of(output_sha256: &str, module_sha256: &str) -> Vec<Self> {
        [("output", output_sha256), ("module", module_sha256)]
            .into_iter()
            .map(|(name, sha256)| Subject {
                name: name.into(),
                digest: SubjectDigest {
                    sha256: sha256.into(),
                },
            })
            .collect()
    }
}

impl Attestation {
    /// Signs `claims` with `key`.
    pub fn sign(claims: Claims, key: &SigningKey) -> Self {
        Self::sign_with(claims, &key.verifying_key(), |message| {
            key.sign(message).to_bytes()
        })
    }

    /// Signs `claims` for `public`, `sign` giving the Ed25519 signature of a message under
    /// its private key: another implementation of the same signature (the runtime's is
    /// faster; Ed25519 signatures are deterministic, so the bytes are the same).
    pub fn sign_with(
        claims: Claims,
        public: &VerifyingKey,
        sign: impl FnOnce(&[u8]) -> [u8; 64],
    ) -> Self {
        let statement = Statement::of(claims, public);
        // Serializing plain strings, integers and lists cannot fail. A run's Statement is 1-2
        // KiB: sized up front, the buffer is not regrown five times on the way.
        let mut payload = Vec::with_capacity(2048);
        if serde_json::to_writer(&mut payload, &statement).is_err() {
            payload.clear();
        }
        Self::seal(&payload, public, sign)
    }

    /// The envelope of `payload`, signed for `public` by `sign`.
    fn seal(payload: &[u8], public: &VerifyingKey, sign: impl FnOnce(&[u8]) -> [u8; 64]) -> Self {
        let sig = sign(&pae(PAYLOAD_TYPE, payload));
        Attestation {
            payload: B64.encode(payload),
            payload_type: PAYLOAD_TYPE.into(),
            signatures: vec![EnvelopeSignature {
                keyid: keyid(public),
                sig: B64.encode(sig),
            }],
        }
    }

    /// The payload's bytes, as signed.
    pub fn payload_bytes(&self) -> Result<Vec<u8>, AttestationError> {
        B64.decode(&self.payload)
            .map_err(|e| AttestationError::Encoding(format!("payload: {e}")))
    }

    /// The Statement, decoded but not verified: for showing, never for trusting.
    pub fn statement(&self) -> Result<Statement, AttestationError> {
        self.statement_of(&self.payload_bytes()?)
    }

    /// The Statement `payload` (this envelope's, decoded) holds.
    fn statement_of(&self, payload: &[u8]) -> Result<Statement, AttestationError> {
        if self.payload_type != PAYLOAD_TYPE {
            return Err(AttestationError::PayloadType(self.payload_type.clone()));
        }
        let statement: Statement = serde_json::from_slice(payload)
            .map_err(|e| AttestationError::Statement(e.to_string()))?;
        statement.check()?;
        Ok(statement)
    }

    /// The predicate, decoded but not verified: for showing, never for trusting.
    pub fn predicate(&self) -> Result<RunPredicate, AttestationError> {
        self.statement().map(|s| s.predicate)
    }

    /// Checks the signature (strict Ed25519: no small-order keys, canonical `s`) against the
    /// predicate's public key, and, when `trusted` is given, that it is that key; returns the
    /// Statement the signature covers.
    pub fn verify(&self, trusted: Option<&VerifyingKey>) -> Result<Statement, AttestationError> {
        let payload = self.payload_bytes()?;
        let statement = self.statement_of(&payload)?;
        let key = parse_public_key(&statement.predicate.public_key)?;
        if let Some(trusted) = trusted
            && trusted != &key
        {
            return Err(AttestationError::UntrustedKey {
                expected: hex::encode(trusted.as_bytes()),
                actual: statement.predicate.public_key,
            });
        }
        let id = keyid(&key);
        let signature = self
            .signatures
            .iter()
            .find(|s| s.keyid == id)
            .ok_or(AttestationError::NoSignature { keyid: id })?;
        let sig = B64
            .decode(&signature.sig)
            .map_err(|e| e.to_string())
            .and_then(|bytes| Signature::from_slice(&bytes).map_err(|e| e.to_string()))
            .map_err(|e| AttestationError::Encoding(format!("signature: {e}")))?;
        key.verify_strict(&pae(&self.payload_type, &payload), &sig)
            .map_err(|_| AttestationError::BadSignature)?;
        Ok(statement)
    }

    /// The digest by which others refer to this attestation: hex SHA-256 of the envelope's
    /// canonical JSON (see the module docs), so it changes with the payload and the signature.
    pub fn sha256(&self) -> String {
        // Fields are declared in sorted order and every value is a string: compact is canonical.
        sha256_hex(&serde_json::to_vec(self).unwrap_or_default())
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
    hex_lower(&Sha256::digest(data))
}

/// Lowercase hex of `bytes`, the same string as `hex::encode`, which builds it one `char` at a
/// time: a sealed task encodes seven digests and keys, and that loop was a visible share of it.
pub fn hex_lower(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    // `encode_to_slice` fails only on a buffer of another length than twice the input's.
    if hex::encode_to_slice(bytes, &mut out).is_err() {
        return hex::encode(bytes);
    }
    // Hex digits are ASCII.
    String::from_utf8(out).unwrap_or_else(|_| hex::encode(bytes))
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
            children: vec![ChildAttestation {
                agent: "helper".into(),
                task: "t1-0".into(),
                attestation_sha256: sha256_hex(b"child"),
            }],
            approvals: Vec::new(),
            input_required: false,
            conversation: None,
            trace_sha256: [1; 32],
            executor: "test \"pod\"".into(),
        }
    }

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[3; 32])
    }

    /// `att` with its Statement edited and re-encoded, the signature kept: a tampered envelope.
    fn tampered(att: &Attestation, edit: impl Fn(&mut Statement)) -> Attestation {
        let mut statement = att.statement().expect("decodes");
        edit(&mut statement);
        Attestation {
            payload: B64.encode(serde_json::to_vec(&statement).expect("json")),
            ..att.clone()
        }
    }

    #[test]
    fn signed_attestation_verifies_and_tampering_fails() {
        let att = Attestation::sign(claims(), &key());
        let statement = att.verify(None).expect("verifies");
        assert_eq!(statement.predicate.resources_used.fuel, 42);
        assert_eq!(att.verify(Some(&key().verifying_key())), Ok(statement));

        let output = tampered(&att, |s| {
            s.predicate.output_sha256 = sha256_hex(b"other");
            s.subject[0].digest.sha256 = sha256_hex(b"other");
        });
        assert_eq!(output.verify(None), Err(AttestationError::BadSignature));

        let other = SigningKey::from_bytes(&[4; 32]);
        assert!(matches!(
            att.verify(Some(&other.verifying_key())),
            Err(AttestationError::UntrustedKey { .. })
        ));
    }

    /// A named edit of a Statement.
    type Edit = (&'static str, Box<dyn Fn(&mut RunPredicate)>);

    #[test]
    fn ending_limits_grants_children_and_task_identity_are_signed() {
        let att = Attestation::sign(claims(), &key());
        let edits: Vec<Edit> = vec![
            (
                "phase",
                Box::new(|p| p.ending = Ending::of(Some(FailureKind::Trap), false)),
            ),
            (
                "namespace",
                Box::new(|p| p.task.namespace = "team-b".into()),
            ),
            ("name", Box::new(|p| p.task.name = "t2".into())),
            ("uid", Box::new(|p| p.task.uid = "2222".into())),
            ("fuel used", Box::new(|p| p.resources_used.fuel += 1)),
            ("fuel limit", Box::new(|p| p.limits_applied.fuel += 1)),
            ("memory", Box::new(|p| p.limits_applied.memory_bytes += 1)),
            (
                "timeout",
                Box::new(|p| p.limits_applied.timeout_millis += 1),
            ),
            (
                "output cap",
                Box::new(|p| p.limits_applied.max_output_bytes += 1),
            ),
            (
                "input cap",
                Box::new(|p| p.limits_applied.max_input_bytes += 1),
            ),
            (
                "grants",
                Box::new(|p| p.limits_applied.capabilities.push(CapabilityName::Signing)),
            ),
            (
                "quota",
                Box::new(|p| p.limits_applied.storage_max_bytes = None),
            ),
            (
                "hosts",
                Box::new(|p| p.limits_applied.allowed_hosts.push("https://evil".into())),
            ),
            ("requirements", Box::new(|p| p.requirements.clear())),
            (
                "config",
                Box::new(|p| p.config_sha256 = sha256_hex(b"other config")),
            ),
            ("children", Box::new(|p| p.children.clear())),
            (
                "approvals",
                Box::new(|p| {
                    p.approvals.push(ApprovalRecord {
                        call: "0-00".into(),
                        subject: crate::approval::CallSubject::Tool {
                            server: "files".into(),
                            tool: "wipe".into(),
                        },
                        decision: crate::approval::Decision::Approved,
                        approver: "mallory".into(),
                        reason: None,
                        decided_at: "2026-11-27T00:00:00Z".into(),
                    })
                }),
            ),
            (
                "trace",
                Box::new(|p| p.trace_sha256 = sha256_hex(b"other trace")),
            ),
        ];
        for (what, edit) in edits {
            let edited = tampered(&att, |s| edit(&mut s.predicate));
            assert_eq!(
                edited.verify(None),
                Err(AttestationError::BadSignature),
                "{what} is not covered by the signature"
            );
        }
    }

    #[test]
    fn the_envelope_is_dsse_over_an_in_toto_statement_any_ed25519_library_checks() {
        let att = Attestation::sign(claims(), &key());
        assert_eq!(att.payload_type, "application/vnd.in-toto+json");
        let payload = att.payload_bytes().expect("base64");
        let json: serde_json::Value = serde_json::from_slice(&payload).expect("json");
        assert_eq!(json["_type"], "https://in-toto.io/Statement/v1");
        assert_eq!(json["predicateType"], "https://ari.dev/attestation/run/v1");
        assert_eq!(json["subject"][0]["name"], "output");
        assert_eq!(json["subject"][0]["digest"]["sha256"], sha256_hex(b"out"));
        assert_eq!(
            json["subject"][1]["digest"]["sha256"],
            sha256_hex(b"module")
        );
        assert_eq!(json["predicate"]["configSha256"], sha256_hex(b"cfg"));
        assert_eq!(json["predicate"]["children"][0]["task"], "t1-0");

        // The signature, checked by hand as a DSSE verifier does: PAE of the decoded payload.
        let [signature] = &att.signatures[..] else {
            panic!("one signature: {:?}", att.signatures)
        };
        assert_eq!(
            signature.keyid,
            sha256_hex(key().verifying_key().as_bytes())
        );
        let sig = B64.decode(&signature.sig).expect("base64");
        let mut message =
            format!("DSSEv1 28 application/vnd.in-toto+json {} ", payload.len()).into_bytes();
        message.extend_from_slice(&payload);
        let sig = Signature::from_slice(&sig).expect("64 bytes");
        assert!(key().verifying_key().verify_strict(&message, &sig).is_ok());
    }

    #[test]
    fn the_digest_is_of_the_canonical_envelope_with_sorted_keys() {
        let att = Attestation::sign(claims(), &key());
        let canonical = format!(
            "{{\"payload\":\"{}\",\"payloadType\":\"{}\",\"signatures\":[{{\"keyid\":\"{}\",\"sig\":\"{}\"}}]}}",
            att.payload, att.payload_type, att.signatures[0].keyid, att.signatures[0].sig
        );
        assert_eq!(att.sha256(), sha256_hex(canonical.as_bytes()));
        let mut resigned = att.clone();
        resigned.signatures[0].sig = B64.encode([0u8; 64]);
        assert_ne!(resigned.sha256(), att.sha256());
    }

    #[test]
    fn envelopes_that_are_not_ari_run_statements_are_refused_with_the_reason() {
        let att = Attestation::sign(claims(), &key());
        let mut wrong_type = att.clone();
        wrong_type.payload_type = "application/json".into();
        assert_eq!(
            wrong_type.verify(None),
            Err(AttestationError::PayloadType("application/json".into()))
        );
        let mut not_base64 = att.clone();
        not_base64.payload = "%%%".into();
        assert!(matches!(
            not_base64.verify(None),
            Err(AttestationError::Encoding(_))
        ));
        let other_predicate = Attestation::seal(
            &serde_json::to_vec(&Statement {
                predicate_type: "https://slsa.dev/provenance/v1".into(),
                ..att.statement().expect("decodes")
            })
            .expect("json"),
            &key().verifying_key(),
            |m| key().sign(m).to_bytes(),
        );
        let err = other_predicate.verify(None).expect_err("not a run");
        assert!(err.to_string().contains("slsa.dev"), "{err}");
        let subject = tampered(&att, |s| s.subject.truncate(1));
        assert!(matches!(
            subject.verify(None),
            Err(AttestationError::Statement(_))
        ));
        let mut unsigned = att.clone();
        unsigned.signatures[0].keyid = "someone-else".into();
        assert!(matches!(
            unsigned.verify(None),
            Err(AttestationError::NoSignature { .. })
        ));
    }

    /// Pins the signed encoding: a change here changes every signature, so it must come with
    /// a new [`PREDICATE_TYPE`] (and this digest updated on purpose).
    #[test]
    fn the_payload_of_fixed_claims_is_pinned() {
        let att = Attestation::sign(claims(), &key());
        let payload = att.payload_bytes().expect("base64");
        assert_eq!(sha256_hex(&payload), PINNED_PAYLOAD);
    }

    #[test]
    fn hex_lower_is_hex_encode() {
        // Every length up to 80 over a deterministic spread of bytes, and every byte value.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..=80 {
            for _ in 0..16 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1);
                        (state >> 56) as u8
                    })
                    .collect();
                assert_eq!(hex_lower(&bytes), hex::encode(&bytes));
            }
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(hex_lower(&all), hex::encode(&all));
        assert_eq!(sha256_hex(b"abc"), hex::encode(Sha256::digest(b"abc")));
    }

    const PINNED_PAYLOAD: &str = "0cbb89b8dd58f547b353ca73af160fc95a07953094c67bcc339910b9331d4416";

    #[test]
    fn a_small_order_key_with_a_trivial_signature_is_refused() {
        // With the identity point as key and R = identity, s = 0, cofactorless non-strict
        // verification accepts any message; strict verification refuses weak keys.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let att = tampered(&Attestation::sign(claims(), &key()), |s| {
            s.predicate.public_key = hex::encode(identity)
        });
        let weak = VerifyingKey::from_bytes(&identity).expect("decodes");
        let mut sig = [0u8; 64];
        sig[0] = 1;
        let forged = Attestation {
            signatures: vec![EnvelopeSignature {
                keyid: keyid(&weak),
                sig: B64.encode(sig),
            }],
            ..att
        };
        let message = pae(PAYLOAD_TYPE, &forged.payload_bytes().expect("base64"));
        assert!(
            ed25519_dalek::Verifier::verify(&weak, &message, &Signature::from_bytes(&sig)).is_ok(),
            "non-strict verification accepts the trivial forgery"
        );
        assert_eq!(forged.verify(None), Err(AttestationError::BadSignature));
    }
}
