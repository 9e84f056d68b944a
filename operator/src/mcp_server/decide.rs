//! What an MCPServer's `Ready` condition and tool list say, as pure functions of what was
//! observed: its credentials Secrets under the marked-Secret rule, and the operator's listing
//! of its tools.
//!
//! Unlike a ModelConfig's keyless probe, listing tools needs the server's credentials, so the
//! operator reads the marked Secrets a server names (as it reads a marked pull secret) and
//! sends them to that URL only; no answer's text reaches status, only fixed texts and the
//! tool list itself, each field bounded.

use ari_crds::MCPServerReason;
use ari_crds::conditions::ConditionStatus;
use ari_crds::mcp_server::{DiscoveredTool, MAX_DESCRIPTION_BYTES, MAX_TOOLS};
use ari_mcp::{ToolError, ToolInfo};

use crate::marked::Credentials;

/// What happened to the listing.
#[derive(Debug, Clone, PartialEq)]
pub enum Probe {
    /// Not sent: the credentials are not usable.
    Skipped,
    /// Not sent: `spec.url` is no URL the probe can request.
    InvalidUrl,
    /// Not sent: see [`crate::probe::Target::NotAllowed`].
    NotAllowed,
    Listed(Vec<ToolInfo>),
    Failed(ToolError),
}

/// The `Ready` condition and the tools for status.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub status: ConditionStatus,
    pub reason: MCPServerReason,
    pub message: String,
    pub tools: Vec<DiscoveredTool>,
}

fn verdict(status: ConditionStatus, reason: MCPServerReason, message: &str) -> Verdict {
    Verdict {
        status,
        reason,
        message: message.to_owned(),
        tools: Vec::new(),
    }
}

/// The worst of a server's credentials (its token's and each header's), in the order a user
/// fixes them: a forbidden name, then a missing Secret or key, then a missing mark.
pub fn worst(all: impl IntoIterator<Item = Credentials>) -> Credentials {
    let rank = |c: &Credentials| match c {
        Credentials::Forbidden => 4,
        Credentials::Missing => 3,
        Credentials::NotMarked => 2,
        Credentials::Marked => 1,
        Credentials::None => 0,
    };
    all.into_iter()
        .max_by_key(rank)
        .unwrap_or(Credentials::None)
}

/// `Ready` from the credentials and the listing. Messages are fixed texts, never what the
/// server sent.
pub fn readiness(creds: Credentials, probe: &Probe) -> Verdict {
    use ConditionStatus::{False, True, Unknown};
    use MCPServerReason as R;
    let label = ari_crds::mcp_server::CREDENTIALS_LABEL;
    match creds {
        Credentials::Forbidden => {
            return verdict(
                False,
                R::CredentialsForbidden,
                "a credential names the namespace's attestation key, no Secret name, or a header the transport owns (Authorization, Content-Type, Mcp-*)",
            );
        }
        Credentials::Missing => {
            return verdict(
                False,
                R::CredentialsMissing,
                "a Secret spec.token or spec.headers names does not exist in this namespace, or lacks the key named",
            );
        }
        Credentials::NotMarked => {
            return verdict(
                False,
                R::CredentialsNotMarked,
                &format!(
                    "a Secret spec.token or spec.headers names is not marked for tool use (label it {label}=true)"
                ),
            );
        }
        Credentials::None | Credentials::Marked => {}
    }
    match probe {
        Probe::Skipped => verdict(Unknown, R::Unreachable, "not listed"),
        Probe::InvalidUrl => verdict(
            False,
            R::InvalidUrl,
            "spec.url is not an http(s) URL with a host and without credentials",
        ),
        Probe::NotAllowed => verdict(
            Unknown,
            R::ProbeNotAllowed,
            "the server is at an internal address the operator may not reach (its admin lists such servers in toolProbe.internalEndpoints); executors may still reach it",
        ),
        Probe::Listed(tools) => Verdict {
            status: True,
            reason: R::ToolsListed,
            message: format!("the server lists {} tool(s)", tools.len()),
            tools: tools.iter().take(MAX_TOOLS).map(discovered).collect(),
        },
        Probe::Failed(ToolError::Unavailable { .. } | ToolError::Timeout { .. }) => verdict(
            False,
            R::Unreachable,
            "the server could not be reached, did not answer in time, or refused the credentials",
        ),
        Probe::Failed(ToolError::TooLarge { .. }) => verdict(
            False,
            R::ToolListTooLarge,
            "the server's tool list is over the client's bounds (256 tools, 4 MiB, 64 pages)",
        ),
        Probe::Failed(_) => verdict(
            False,
            R::ServerError,
            "the server answered the tool list request with an error",
        ),
    }
}

/// A listed tool as status keeps it: the name and title bounded, the description cut.
fn discovered(tool: &ToolInfo) -> DiscoveredTool {
    DiscoveredTool {
        name: clip(&tool.name, 128),
        title: tool.title.as_deref().map(|t| clip(t, 256)),
        description: tool
            .description
            .as_deref()
            .map(|d| clip(d, MAX_DESCRIPTION_BYTES)),
        read_only: tool.hints.read_only,
        destructive: tool.hints.destructive,
        idempotent: tool.hints.idempotent,
        open_world: tool.hints.open_world,
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
fn clip(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use ari_mcp::ToolHints;

    use super::*;

    fn tool(name: &str, description: &str, destructive: Option<bool>) -> ToolInfo {
        ToolInfo {
            name: name.into(),
            title: None,
            description: Some(description.into()),
            input_schema: serde_json::json!({"type": "object"}),
            hints: ToolHints {
                destructive,
                ..ToolHints::default()
            },
        }
    }

    #[test]
    fn readiness_from_credentials_and_listing() {
        use ConditionStatus::{False, True, Unknown};
        use MCPServerReason as R;
        let listed = Probe::Listed(vec![tool("echo", "says it back", None)]);
        #[rustfmt::skip]
        let cases: Vec<(&str, Credentials, Probe, ConditionStatus, R, &str)> = vec![
            ("lists its tools",      Credentials::Marked,    listed.clone(),  True,    R::ToolsListed,          "lists 1 tool(s)"),
            ("no credentials needed", Credentials::None,     listed.clone(),  True,    R::ToolsListed,          "lists 1 tool(s)"),
            ("unreachable or 401",   Credentials::Marked,    Probe::Failed(ToolError::unavailable("HTTP 401 <html>secret page</html>")), False, R::Unreachable, "refused the credentials"),
            ("timeout",              Credentials::None,      Probe::Failed(ToolError::timeout("t")), False, R::Unreachable, "in time"),
            ("too many tools",       Credentials::None,      Probe::Failed(ToolError::too_large("x")), False, R::ToolListTooLarge, "256 tools"),
            ("json-rpc error",       Credentials::None,      Probe::Failed(ToolError::server("internal detail")), False, R::ServerError, "with an error"),
            ("internal, not listed", Credentials::None,      Probe::NotAllowed, Unknown, R::ProbeNotAllowed,     "toolProbe.internalEndpoints"),
            ("bad url",              Credentials::None,      Probe::InvalidUrl, False,   R::InvalidUrl,          "http(s) URL"),
            ("missing first",        Credentials::Missing,   listed.clone(),  False,   R::CredentialsMissing,   "does not exist"),
            ("unmarked",             Credentials::NotMarked, Probe::Skipped,  False,   R::CredentialsNotMarked, "ari.dev/tool-credentials=true"),
            ("attestation key",      Credentials::Forbidden, Probe::Skipped,  False,   R::CredentialsForbidden, "attestation key"),
        ];
        for (what, creds, probe, status, reason, says) in cases {
            let v = readiness(creds, &probe);
            assert_eq!((v.status, v.reason), (status, reason), "{what}");
            assert!(v.message.contains(says), "{what}: {}", v.message);
            // What the server sent never reaches status.
            for leak in ["secret page", "internal detail"] {
                assert!(!v.message.contains(leak), "{what}: {}", v.message);
            }
            assert_eq!(v.tools.is_empty(), v.status != True, "{what}");
        }
    }

    #[test]
    fn status_keeps_each_tool_bounded_with_its_hints() {
        let long = "é".repeat(600);
        let v = readiness(
            Credentials::None,
            &Probe::Listed(vec![tool("rm", &long, Some(true))]),
        );
        let t = &v.tools[0];
        assert_eq!(t.destructive, Some(true));
        let kept = t.description.as_deref().unwrap_or_default();
        assert!(kept.len() <= MAX_DESCRIPTION_BYTES && kept.len() >= MAX_DESCRIPTION_BYTES - 1);
        assert!(long.starts_with(kept));
    }

    #[test]
    fn the_worst_credential_decides() {
        use Credentials::*;
        assert_eq!(worst([]), None);
        assert_eq!(worst([Marked, None]), Marked);
        assert_eq!(worst([Marked, NotMarked, Missing]), Missing);
        assert_eq!(worst([NotMarked, Forbidden, Marked]), Forbidden);
    }
}
