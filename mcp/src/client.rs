//! The MCP client: `rmcp` over streamable HTTP, on one reqwest client that follows no
//! redirect (a redirect would carry the credentials wherever it points) and uses no proxy.
//! Every answer is bounded in bytes before it is parsed (rmcp's response limits), the tool
//! list in length, and every exchange in time; dropping a call's future abandons it (rmcp then
//! tells the server the request is cancelled).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use reqwest::header::{HeaderName, HeaderValue};

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation,
    PaginatedRequestParams, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use rmcp::{RoleClient, ServiceError};
use tokio::time::Instant;

use crate::error::ToolError;
use crate::server::{Protocol, ToolServer};
use crate::types::{Arguments, ToolInfo, ToolResult, redact_value};

/// The bounds every exchange is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of one answer (a tool's result, a page of the tool list), counted as its
    /// record keeps it and, before parsing, as the server sent it (plus 64 KiB of envelope).
    pub max_result_bytes: usize,
    /// Most tools one server may list; a longer list is `too-large`.
    pub max_tools: usize,
    /// Most bytes of one call's arguments, as JSON.
    pub max_arguments_bytes: usize,
    /// Longest a call may take (less when the task's deadline is sooner).
    pub call_timeout: Duration,
    /// Longest the handshake with a server may take (less when the task's deadline is sooner).
    pub connect_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_result_bytes: 4 << 20,
            max_tools: 256,
            max_arguments_bytes: 1 << 20,
            call_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(15),
        }
    }
}

/// Envelope bytes allowed around a result before the transport refuses the answer.
const ENVELOPE_BYTES: usize = 64 << 10;
/// Most pages of a tool list read (a server paging one tool at a time cannot keep the host).
const MAX_PAGES: usize = 64;

/// The HTTP client of every tools call of a process.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    limits: Limits,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("limits", &self.limits)
            .finish()
    }
}

impl Client {
    pub fn new(limits: Limits) -> Result<Client, ToolError> {
        Client::build(limits, None)
    }

    /// A client whose every connection goes to the addresses `resolver` lets through: the
    /// operator's, whose discovery requests go to URLs a namespace user wrote.
    pub fn with_resolver(
        limits: Limits,
        resolver: Arc<dyn reqwest::dns::Resolve>,
    ) -> Result<Client, ToolError> {
        Client::build(limits, Some(resolver))
    }

    fn build(
        limits: Limits,
        resolver: Option<Arc<dyn reqwest::dns::Resolve>>,
    ) -> Result<Client, ToolError> {
        // rustls needs a process-wide crypto provider; ring is the one this workspace builds.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(limits.connect_timeout)
            .user_agent(concat!("ari/", env!("CARGO_PKG_VERSION")));
        if let Some(resolver) = resolver {
            builder = builder.dns_resolver(resolver);
        }
        let http = builder
            .build()
            .map_err(|e| ToolError::unavailable(format!("building the HTTP client: {e}")))?;
        Ok(Client { http, limits })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Every tool `server` lists, by `deadline`: a discovery outside any task (nothing is
    /// recorded), for the operator's view of a declared server.
    pub async fn list_tools(
        &self,
        server: &ToolServer,
        deadline: Instant,
    ) -> Result<Vec<ToolInfo>, ToolError> {
        let connection = self.connect(server, deadline).await?;
        connection.list(server, deadline).await
    }

    /// Opens a client session with `server` (a discover or an `initialize`, as its
    /// [`Protocol`] says), by `deadline` at the latest.
    pub(crate) async fn connect(
        &self,
        server: &ToolServer,
        deadline: Instant,
    ) -> Result<Connection, ToolError> {
        let mut headers = HashMap::new();
        for (name, value) in server.credentials.headers() {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ToolError::unavailable(format!("`{name}` is not a header name")))?;
            let mut value = reqwest::header::HeaderValue::from_str(value.expose())
                .map_err(|_| ToolError::unavailable("a credential header holds bad characters"))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str())
            .custom_headers(headers)
            .max_json_response_size(self.limits.max_result_bytes + ENVELOPE_BYTES)
            .max_concurrent_requests(1)
            .reinit_on_expired_session(false);
        config.max_sse_event_size = self.limits.max_result_bytes + ENVELOPE_BYTES;
        if let Some(token) = server.credentials.bearer() {
            config = config.auth_header(token.expose());
        }
        let watched = Watched {
            http: self.http.clone(),
            oversized: Arc::new(AtomicBool::new(false)),
        };
        let oversized = watched.oversized.clone();
        let transport = StreamableHttpClientTransport::with_client(watched, config);
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("ari", env!("CARGO_PKG_VERSION")),
        );
        let lifecycle = match server.protocol {
            Protocol::Auto => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
            Protocol::Stateless => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
            Protocol::Session => ClientLifecycleMode::Initialize,
        };
        let info = match server.protocol {
            Protocol::Session => info.with_protocol_version(ProtocolVersion::V_2025_11_25),
            _ => info,
        };
        let until = deadline.min(Instant::now() + self.limits.connect_timeout);
        let service =
            tokio::time::timeout_at(until, info.serve_with_lifecycle(transport, lifecycle))
                .await
                .map_err(|_| {
                    ToolError::unavailable("the server did not complete the handshake in time")
                })?
                .map_err(|e| {
                    ToolError::unavailable(server.redact(&format!("cannot connect: {}", chain(&e))))
                })?;
        Ok(Connection {
            service,
            limits: self.limits,
            oversized,
        })
    }
}

/// A client session with one server.
pub(crate) struct Connection {
    service: RunningService<RoleClient, ClientConfig>,
    limits: Limits,
    /// Set when the transport refused an answer over its byte limits.
    oversized: Arc<AtomicBool>,
}

impl Connection {
    /// Every tool the server lists (all pages), credentials cut out.
    pub(crate) async fn list(
        &self,
        server: &ToolServer,
        deadline: Instant,
    ) -> Result<Vec<ToolInfo>, ToolError> {
        let until = deadline.min(Instant::now() + self.limits.call_timeout);
        let work = async {
            let mut tools = Vec::new();
            let mut cursor = None;
            for _ in 0..MAX_PAGES {
                let params = PaginatedRequestParams::default().with_cursor(cursor.take());
                let page = self
                    .service
                    .list_tools(Some(params))
                    .await
                    .map_err(|e| self.classify(server, &e))?;
                tools.extend(page.tools);
                if tools.len() > self.limits.max_tools {
                    return Err(ToolError::too_large(format!(
                        "the server lists more than {} tools",
                        self.limits.max_tools
                    )));
                }
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => return Ok(tools),
                }
            }
            Err(ToolError::too_large(format!(
                "the tool list has more than {MAX_PAGES} pages"
            )))
        };
        let tools = within(until, deadline, work).await?;
        let tools: Vec<ToolInfo> = tools
            .into_iter()
            .map(|t| redacted(server, ToolInfo::from(t)))
            .collect::<Result<_, _>>()?;
        let bytes = serde_json::to_vec(&tools).map_or(0, |b| b.len());
        if bytes > self.limits.max_result_bytes {
            return Err(ToolError::too_large(format!(
                "the tool list is {bytes} bytes, more than the {} allowed",
                self.limits.max_result_bytes
            )));
        }
        Ok(tools)
    }

    /// One call of `tool` with `arguments`, credentials cut out of the result.
    pub(crate) async fn call(
        &self,
        server: &ToolServer,
        tool: &str,
        arguments: &Arguments,
        deadline: Instant,
    ) -> Result<ToolResult, ToolError> {
        let until = deadline.min(Instant::now() + self.limits.call_timeout);
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.clone());
        let result = within(until, deadline, async {
            self.service
                .call_tool(params)
                .await
                .map_err(|e| self.classify(server, &e))
        })
        .await?;
        let content = result
            .content
            .into_iter()
            .map(|c| serde_json::to_value(c).unwrap_or_default())
            .collect();
        let result = redacted(
            server,
            ToolResult {
                content,
                structured: result.structured_content,
                is_error: result.is_error.unwrap_or(false),
            },
        )?;
        let bytes = serde_json::to_vec(&result).map_or(0, |b| b.len());
        if bytes > self.limits.max_result_bytes {
            return Err(ToolError::too_large(format!(
                "the result is {bytes} bytes, more than the {} allowed",
                self.limits.max_result_bytes
            )));
        }
        Ok(result)
    }

    /// A service error as the guest's error. An SSE event over the limit closes rmcp's
    /// transport without saying why; the watched client saw it.
    fn classify(&self, server: &ToolServer, error: &ServiceError) -> ToolError {
        if self.oversized.swap(false, Ordering::SeqCst) {
            return ToolError::too_large(format!(
                "the answer is larger than {} bytes",
                self.limits.max_result_bytes
            ));
        }
        classify(server, error)
    }
}

/// An SSE answer as rmcp's clients hand it over.
type SseStream = futures::stream::BoxStream<'static, Result<sse_stream::Sse, SseError>>;

/// rmcp's reqwest client, watched: whether it refused an answer over its byte limits, which
/// rmcp reports only as a closed transport when it happens inside an SSE stream.
#[derive(Clone)]
struct Watched {
    http: reqwest::Client,
    oversized: Arc<AtomicBool>,
}

impl Watched {
    fn watch_stream(&self, stream: SseStream) -> SseStream {
        let oversized = self.oversized.clone();
        stream
            .inspect_err(move |e| {
                if too_large(e) {
                    oversized.store(true, Ordering::SeqCst);
                }
            })
            .boxed()
    }

    fn watch<T>(
        &self,
        result: Result<T, StreamableHttpError<reqwest::Error>>,
    ) -> Result<T, StreamableHttpError<reqwest::Error>> {
        if let Err(e) = &result
            && too_large(e)
        {
            self.oversized.store(true, Ordering::SeqCst);
        }
        result
    }
}

impl StreamableHttpClient for Watched {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let response = self.watch(
            self.http
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await,
        )?;
        Ok(match response {
            StreamableHttpPostResponse::Sse(stream, session) => {
                StreamableHttpPostResponse::Sse(self.watch_stream(stream), session)
            }
            other => other,
        })
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.http
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        let stream = self.watch(
            self.http
                .get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    auth_header,
                    custom_headers,
                    max_sse_event_size,
                )
                .await,
        )?;
        Ok(self.watch_stream(stream))
    }
}

/// `value` with the server's credentials cut out of every string in it.
fn redacted<T: serde::Serialize + serde::de::DeserializeOwned>(
    server: &ToolServer,
    value: T,
) -> Result<T, ToolError> {
    let json = serde_json::to_value(value)
        .map_err(|e| ToolError::server(format!("an unreadable answer: {e}")))?;
    let json = redact_value(json, &|s| server.redact(s));
    serde_json::from_value(json)
        .map_err(|e| ToolError::server(format!("an unreadable answer: {e}")))
}

/// `work`, cut at `until`: a `timeout` when that is the call's own limit, an `unavailable`
/// naming the deadline when it is the task's (the host ends the task there anyway).
async fn within<T>(
    until: Instant,
    deadline: Instant,
    work: impl Future<Output = Result<T, ToolError>>,
) -> Result<T, ToolError> {
    match tokio::time::timeout_at(until, work).await {
        Ok(result) => result,
        Err(_) if until >= deadline => Err(ToolError::timeout("the task's deadline passed")),
        Err(_) => Err(ToolError::timeout("no answer within the call's time limit")),
    }
}

/// A service error as the guest's error, its text redacted.
fn classify(server: &ToolServer, error: &ServiceError) -> ToolError {
    let text = server.redact(&chain(error));
    match error {
        ServiceError::McpError(data) => {
            let message = server.redact(&data.message);
            match data.code.0 {
                // Invalid params: MCP's answer to arguments its schema refuses, and to an
                // unknown tool.
                -32602 if message.to_ascii_lowercase().contains("unknown tool") => {
                    ToolError::not_found(message)
                }
                -32602 => ToolError::invalid(message),
                _ => ToolError::server(message),
            }
        }
        ServiceError::Timeout { .. } => ToolError::timeout(text),
        ServiceError::TransportSend(_) | ServiceError::TransportClosed if too_large(error) => {
            ToolError::too_large(text)
        }
        ServiceError::TransportSend(_) | ServiceError::TransportClosed => {
            ToolError::unavailable(text)
        }
        _ => ToolError::server(text),
    }
}

/// Whether the transport refused an answer over its byte limits (a whole JSON body, or one
/// SSE event, whose error type rmcp keeps private: it is known by its text).
fn too_large(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(StreamableHttpError::<reqwest::Error>::ResponseBodyTooLarge { .. }) =
            e.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            return true;
        }
        if e.to_string().contains("exceeded the maximum size") {
            return true;
        }
        source = e.source();
    }
    false
}

/// An error and its causes on one line.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = e.source();
    }
    text
}
