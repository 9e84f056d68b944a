//! ari Agents as MCP tools: `/mcp/{namespace}` speaks MCP over streamable HTTP (rmcp's server,
//! stateless: no session is kept between requests), and each Agent of the namespace exposed
//! over A2A is a tool named after it, described by its description and skills, whose one
//! argument, `input`, becomes a Task's input. A call runs the Task and answers with its output,
//! state and attestation digest.
//!
//! The same rules as A2A hold: the bearer token is checked (TokenReview) from the headers
//! before the body is read, the body is bounded in size and time, each caller is held to their
//! request rate, and listing or calling needs `create` on `tasks` in the namespace
//! (SubjectAccessReview, as `SendMessage`); the Task is created as the caller's, so A2A's
//! `GetTask` and `kubectl get tasks -l ari.dev/a2a-caller-id` find it.

use std::sync::Arc;

use ari_crds::Task as AriTask;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use kube::ResourceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode, ErrorData,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::a2a::TaskState;
use crate::auth::{Access, Caller};
use crate::card::Exposed;
use crate::convert;
use crate::error::Error;
use crate::gateway::Gateway;
use crate::methods::Target;

/// Most tools one listing names (exposed Agents of a namespace, by name).
pub const MAX_TOOLS: usize = 256;
/// Longest tool description: the Agent's description and its skills, cut.
const MAX_DESCRIPTION: usize = 2048;

/// Who called, and where: put in the request by [`gate`] once the token was accepted.
#[derive(Clone, Debug)]
struct McpCaller {
    caller: Caller,
    key: String,
    namespace: String,
}

/// The MCP service of every namespace; [`gate`] runs before it.
pub fn service(gw: Arc<Gateway>) -> StreamableHttpService<AgentTools, NeverSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(gw.max_body_bytes)
        // The gateway is reached by the names its admin gives it (a Service, an Ingress); the
        // token, not the Host header, is what admits a caller.
        .disable_allowed_hosts();
    let handler = AgentTools { gw };
    StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// Authenticates from the headers, then reads the body within its bounds, before rmcp sees
/// the request: an unauthenticated caller costs one TokenReview at most and never a body.
pub async fn gate(State(gw): State<Arc<Gateway>>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let namespace = namespace_of(parts.uri.path()).map(str::to_owned);
    let Some(namespace) = namespace else {
        return crate::routes::refuse(&gw, &Error::AgentNotFound("no namespace".into()), true);
    };
    let (caller, key) = match crate::routes::authenticate(&gw, &parts).await {
        Ok(who) => who,
        Err(e) => return crate::routes::refuse(&gw, &e, true),
    };
    let body = if parts.method == axum::http::Method::POST {
        match crate::routes::read_body(&gw, &parts, body).await {
            Ok(b) => Body::from(b),
            Err(e) => return crate::routes::refuse(&gw, &e, true),
        }
    } else {
        Body::empty()
    };
    parts.extensions.insert(McpCaller {
        caller,
        key,
        namespace,
    });
    next.run(Request::from_parts(parts, body))
        .await
        .into_response()
}

/// `ns` of `/mcp/ns`, when it can be a namespace name.
fn namespace_of(path: &str) -> Option<&str> {
    let ns = path.strip_prefix("/mcp/")?.trim_end_matches('/');
    let ok = !ns.is_empty()
        && ns.len() <= 63
        && ns
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    ok.then_some(ns)
}

/// The MCP server of one request: the namespace's exposed Agents as tools.
#[derive(Clone)]
pub struct AgentTools {
    gw: Arc<Gateway>,
}

impl AgentTools {
    /// The caller [`gate`] admitted, allowed to create Tasks in its namespace.
    async fn admitted(&self, cx: &RequestContext<RoleServer>) -> Result<McpCaller, ErrorData> {
        let who = cx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<McpCaller>())
            .cloned()
            .ok_or_else(|| to_mcp(&Error::Unauthenticated))?;
        self.gw
            .auth
            .allow(
                &who.caller,
                &who.key,
                Access::CreateTasks,
                &who.namespace,
                "",
            )
            .await
            .map_err(|e| to_mcp(&e))?;
        Ok(who)
    }
}

impl ServerHandler for AgentTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "ari-gateway",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Each tool is an ari Agent: its input runs as one Task, sandboxed and metered, \
                 and the answer carries the Task's signed attestation digest.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let who = self.admitted(&cx).await?;
        let tools = self
            .gw
            .hub
            .agents_in(&who.namespace, MAX_TOOLS)
            .iter()
            .map(|a| tool(a))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let who = self.admitted(&cx).await?;
        let agent = request.name.to_string();
        if self.gw.hub.agent(&who.namespace, &agent).is_none() {
            return Err(ErrorData::invalid_params(
                format!("no tool {:?}", convert::cut(&agent, 64)),
                None,
            ));
        }
        // Bad arguments are the tool's error, which the model can read and correct (MCP:
        // input validation errors are tool execution errors); an unknown tool is the protocol's.
        let input = match request.arguments.as_ref().and_then(|a| a.get("input")) {
            Some(Value::String(s)) => s.clone(),
            _ => {
                let why = ContentBlock::text("arguments.input must be a string");
                return Ok(CallToolResult::error(vec![why]).into());
            }
        };
        let t = Target {
            namespace: &who.namespace,
            agent: &agent,
        };
        let task = self
            .gw
            .run_text(&t, &who.caller, input)
            .await
            .map_err(|e| to_mcp(&e))?;
        self.gw
            .metrics
            .calls
            .with_label_values(&["mcp/tools/call", "ok"])
            .inc();
        Ok(answer(&task).into())
    }
}

/// A gateway refusal as an MCP error (the JSON-RPC code A2A would give).
fn to_mcp(e: &Error) -> ErrorData {
    ErrorData::new(ErrorCode(e.rpc_code() as i32), e.to_string(), None)
}

/// The tool an exposed Agent is.
fn tool(a: &Exposed) -> Tool {
    let mut description = a.description.clone().unwrap_or_default();
    for s in &a.a2a.skills {
        description.push_str(&format!("\n- {}: {}", s.name, s.description));
    }
    let description = convert::cut(description.trim(), MAX_DESCRIPTION).to_owned();
    let schema: JsonObject = serde_json::from_value(json!({
        "type": "object",
        "properties": {"input": {"type": "string", "description": "The Task's input"}},
        "required": ["input"],
        "additionalProperties": false,
    }))
    .unwrap_or_default();
    let mut annotations = ToolAnnotations::new();
    annotations.title = Some(a.name.clone());
    Tool::new(a.name.clone(), description, Arc::new(schema)).with_annotations(annotations)
}

/// A Task as a tool result: its output as text, `isError` unless it succeeded, and what a
/// caller needs to find and check it in `structuredContent`.
fn answer(task: &AriTask) -> CallToolResult {
    let state = convert::state(task);
    let status = task.status.clone().unwrap_or_default();
    let text = match state {
        TaskState::Completed => status
            .output
            .clone()
            .or_else(|| {
                status
                    .output_sha256
                    .as_ref()
                    .map(|s| format!("(output sha256 {s})"))
            })
            .unwrap_or_default(),
        s if s.is_terminal() => status.message.clone().unwrap_or_else(|| format!("{s:?}")),
        TaskState::InputRequired => format!(
            "paused: a call waits for a person's approval (kubectl ari approve|reject task/{})",
            task.name_any()
        ),
        _ => format!(
            "still running: follow task {} over A2A (GetTask) or kubectl",
            task.name_any()
        ),
    };
    let mut result = if state == TaskState::Completed {
        CallToolResult::success(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    };
    result.structured_content = Some(json!({
        "task": task.name_any(),
        "state": state,
        "reason": status.reason.map(|r| r.as_str()),
        "outputSha256": status.output_sha256,
        "attestationSha256": status.attestation.as_ref().map(|a| a.sha256()),
    }));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_namespace_name_is_a_namespace() {
        assert_eq!(namespace_of("/mcp/team-a"), Some("team-a"));
        assert_eq!(namespace_of("/mcp/team-a/"), Some("team-a"));
        for bad in ["/mcp/", "/mcp/Team", "/mcp/a/b", "/mcp/a_b", "/a2a/x"] {
            assert_eq!(namespace_of(bad), None, "{bad}");
        }
        assert_eq!(namespace_of(&format!("/mcp/{}", "a".repeat(64))), None);
    }

    #[test]
    fn an_agent_is_a_tool_of_one_string_argument_described_by_its_skills() {
        let a = Exposed {
            namespace: "team".into(),
            name: "wordcount".into(),
            description: Some("Counts words.".into()),
            a2a: serde_json::from_value(json!({
                "exposed": true,
                "skills": [{"id": "count", "name": "count", "description": "words of a text"}]
            }))
            .expect("a2a"),
            module_digest: None,
            generation: 1,
            signed: None,
        };
        let t = tool(&a);
        assert_eq!(t.name, "wordcount");
        assert_eq!(
            t.description.as_deref(),
            Some("Counts words.\n- count: words of a text")
        );
        assert_eq!(t.input_schema.get("required"), Some(&json!(["input"])));
    }

    #[test]
    fn a_finished_task_answers_with_its_output_and_attestation_digest() {
        let mut task: AriTask = serde_json::from_value(json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "wordcount-a2a-x"},
            "spec": {"agentRef": {"name": "wordcount"}},
            "status": {"phase": "Succeeded", "reason": "Completed", "output": "3",
                       "outputSha256": "ab"}
        }))
        .expect("task");
        let ok = serde_json::to_value(answer(&task)).expect("json");
        assert_eq!(ok["isError"], json!(false));
        assert_eq!(ok["content"][0]["text"], json!("3"));
        assert_eq!(ok["structuredContent"]["task"], json!("wordcount-a2a-x"));
        assert_eq!(
            ok["structuredContent"]["state"],
            json!("TASK_STATE_COMPLETED")
        );
        if let Some(s) = task.status.as_mut() {
            s.phase = Some(ari_crds::TaskPhase::Failed);
            s.reason = Some(ari_crds::TaskReason::FuelExhausted);
            s.message = Some("out of fuel".into());
        }
        let failed = serde_json::to_value(answer(&task)).expect("json");
        assert_eq!(failed["isError"], json!(true));
        assert_eq!(failed["content"][0]["text"], json!("out of fuel"));
    }
}
