//! ari's shared vocabulary, one type per concept: what a capability is called, what an Agent is
//! granted and a Task requires (and whether that fits), how an Agent may be used, how a Task ends,
//! what a run used and was limited to, and the signed attestation of it; the network allow-list
//! grammar the operator validates and the executor enforces.
//!
//! The runtime (`ari-runtime`) produces these values, the CRDs (`ari-crds`) embed them in
//! `Task.status`, and `ari verify` reads them back; because all three use these very types,
//! nothing converts between copies and no field can be lost on the way. Nothing here depends on
//! Kubernetes or Wasmtime. The `schema` feature derives JSON Schemas for the CRDs.

pub mod approval;
pub mod attestation;
pub mod capability;
pub mod card;
pub mod conversation;
pub mod declaration;
pub mod grant;
pub mod hosts;
pub mod keys;
pub mod limits;
pub mod mode;
pub mod names;
pub mod outcome;
pub mod price;
pub mod record;
pub mod requirements;
pub mod secret;
pub mod tool;
pub mod usage;

pub use approval::{
    AgentsApproval, Approval, ApprovalRecord, ApprovalRule, CallKind, CallSubject, Decision,
    DestructivePolicy, HostsApproval, NotAdded, add_decision,
};
pub use attestation::{Attestation, AttestationError, Claims, Ending, TaskIdentity, sha256_hex};
pub use capability::{CapabilityName, UnknownCapability};
pub use card::{CardError, CardSignature, SignedCard};
pub use conversation::{ConversationLink, Turn};
pub use declaration::{Declaration, DeclarationError};
pub use grant::{
    DelegationGrant, EmptyGrant, GrantSet, ModelsGrant, NetworkGrant, SecretKeyRef, SigningGrant,
    StorageGrant, ToolServerGrant, ToolsGrant,
};
pub use limits::{
    DelegationApplied, LimitsApplied, McpProtocol, ModelApplied, ModelEndpoint, ModelProvider,
    SchemaStyle, ToolServerApplied,
};
pub use mode::{AgentMode, TaskOrigin};
pub use outcome::{Failure, FailureKind, TaskPhase, TaskReason};
pub use price::{BadPrice, Cost, Price, Prices};
pub use requirements::{Denied, TaskRequirements};
pub use secret::Secret;
pub use tool::ToolOutcome;
pub use usage::{Estimate, ModelCalls, ResourcesUsed, TokenUsage, merge_calls};
