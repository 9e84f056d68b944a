//! The HTTP surface: cards, JSON-RPC, the plain event stream, and the probe port.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use tracing::warn;

use crate::auth::{Access, Caller};
use crate::card::{self, Exposed};
use crate::error::Error;
use crate::gateway::Gateway;
use crate::methods::{Scope, StreamItem, Target};
use crate::rpc::{self, Method};

/// Keep-alive comments on open streams: a vanished client is noticed by the failed write.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The A2A router. Request bodies are read by [`call`] itself, after the token was accepted.
pub fn router(gw: Arc<Gateway>) -> Router {
    Router::new()
        .route("/a2a/{namespace}/{agent}", post(call))
        .route(
            "/a2a/{namespace}/{agent}/.well-known/agent-card.json",
            get(agent_card),
        )
        .route(
            "/a2a/{namespace}/{agent}/.well-known/agent.json",
            get(agent_card),
        )
        .route(
            "/a2a/{namespace}/{agent}/tasks/{id}/events",
            get(task_events),
        )
        .route_service(
            "/mcp/{namespace}",
            tower::ServiceBuilder::new()
                .layer(axum::middleware::from_fn_with_state(
                    gw.clone(),
                    crate::mcp::gate,
                ))
                .service(crate::mcp::service(gw.clone())),
        )
        .layer(DefaultBodyLimit::disable())
        .with_state(gw)
}

/// `/healthz`, `/readyz` (both watches listed), `/metrics`. Served on the probe port, which
/// the chart's Service does not expose: only what reaches the pod itself (the kubelet,
/// Prometheus) reads it.
pub fn probe_router(gw: Arc<Gateway>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(gw): State<Arc<Gateway>>| async move {
                if gw.hub.is_ready() {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(gw): State<Arc<Gateway>>| async move {
                gw.metrics.streams_open.set(gw.limits.open_streams() as i64);
                gw.metrics.followed.set(gw.hub.followed() as i64);
                gw.metrics.agents_cached.set(gw.hub.agents_cached() as i64);
                gw.metrics.render()
            }),
        )
        .with_state(gw)
}

/// An error before any method ran: its HTTP status with a JSON-RPC error body.
fn refusal(gw: &Gateway, id: &Value, e: &Error) -> Response {
    log_kube(e);
    gw.metrics
        .refused
        .with_label_values(&[e.metric_label()])
        .inc();
    let status = e.http_status().unwrap_or(StatusCode::OK);
    let mut resp = (status, axum::Json(rpc::error(id, e))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    resp
}

/// A refusal before any method ran, with no request id; `unread`: the body was not read
/// (see [`closing`]).
pub(crate) fn refuse(gw: &Gateway, e: &Error, unread: bool) -> Response {
    let resp = refusal(gw, &Value::Null, e);
    if unread { closing(resp) } else { resp }
}

/// A refusal sent before the request's body was read: the connection cannot carry another
/// request (the unread body is in the way, and the server closes it), so the answer says so
/// and a keep-alive client opens a new one instead of losing its next request (RFC 9112 9.6).
fn closing(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    resp
}

/// The address the connection came from (unspecified when none was recorded).
fn source(parts: &Parts) -> IpAddr {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

/// Who is calling, from the headers alone, within their rate.
pub(crate) async fn authenticate(gw: &Gateway, parts: &Parts) -> Result<(Caller, String), Error> {
    let (caller, key) = gw.auth.caller(&parts.headers, source(parts)).await?;
    gw.limits.request(&caller.username)?;
    Ok((caller, key))
}

/// Who is calling, within their rate, allowed `access` here.
async fn admit(
    gw: &Gateway,
    parts: &Parts,
    access: Access,
    namespace: &str,
    agent: &str,
) -> Result<(Caller, String), Error> {
    let (caller, key) = authenticate(gw, parts).await?;
    gw.auth
        .allow(&caller, &key, access, namespace, agent)
        .await?;
    Ok((caller, key))
}

/// Whose tasks the caller may see here: everyone's with `get` on `tasks/a2a-all`, else their
/// own.
async fn scope(
    gw: &Gateway,
    (caller, key): &(Caller, String),
    namespace: &str,
    agent: &str,
) -> Result<Scope, Error> {
    let all = match gw
        .auth
        .allow(caller, key, Access::AllCallers, namespace, agent)
        .await
    {
        Ok(()) => true,
        Err(Error::Forbidden(_)) => false,
        Err(e) => return Err(e),
    };
    Ok(Scope::of(caller, all))
}

/// The exposed Agent `namespace/agent`, or `AgentNotFound`.
fn exposed(gw: &Gateway, namespace: &str, agent: &str) -> Result<Arc<Exposed>, Error> {
    gw.hub
        .agent(namespace, agent)
        .ok_or_else(|| Error::AgentNotFound(format!("{namespace}/{agent}")))
}

/// The request body, read only now (the caller is known): at most `max_body_bytes`
/// (`BodyTooLarge`), within `body_timeout` (`BodyTimeout`).
pub(crate) async fn read_body(gw: &Gateway, parts: &Parts, body: Body) -> Result<Bytes, Error> {
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > gw.max_body_bytes as u64) {
        return Err(Error::BodyTooLarge);
    }
    match tokio::time::timeout(
        gw.body_timeout,
        axum::body::to_bytes(body, gw.max_body_bytes),
    )
    .await
    {
        Err(_) => Err(Error::BodyTimeout),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let inner = e.into_inner();
            if inner.is::<http_body_util::LengthLimitError>() {
                Err(Error::BodyTooLarge)
            } else {
                Err(Error::InvalidRequest("the body could not be read".into()))
            }
        }
    }
}

async fn agent_card(
    State(gw): State<Arc<Gateway>>,
    Path((namespace, agent)): Path<(String, String)>,
    req: Request,
) -> Response {
    let (parts, _) = req.into_parts();
    let found = gw.hub.agent(&namespace, &agent);
    let public = found.as_ref().is_some_and(|a| a.a2a.public_card);
    // Without a public card, a caller must be allowed to read the Agent: an unauthenticated
    // caller learns nothing, not even whether the Agent exists.
    if !public && let Err(e) = admit(&gw, &parts, Access::GetAgent, &namespace, &agent).await {
        return refusal(&gw, &Value::Null, &e);
    }
    let Some(found) = found else {
        return refusal(
            &gw,
            &Value::Null,
            &Error::AgentNotFound(format!("{namespace}/{agent}")),
        );
    };
    axum::Json(card::served(&found, &gw.public_url)).into_response()
}

fn log_kube(e: &Error) {
    if let Error::Kube(k) = e {
        warn!(error = %k, "API server call failed");
    }
}

async fn call(
    State(gw): State<Arc<Gateway>>,
    Path((namespace, agent)): Path<(String, String)>,
    req: Request,
) -> Response {
    let (parts, body) = req.into_parts();
    // The token is checked from the headers before a byte of the body is read.
    let who = match authenticate(&gw, &parts).await {
        Ok(who) => who,
        Err(e) => return closing(refusal(&gw, &Value::Null, &e)),
    };
    let body = match read_body(&gw, &parts, body).await {
        Ok(b) => b,
        Err(e) => return closing(refusal(&gw, &Value::Null, &e)),
    };
    let rpc::Parsed {
        id,
        method,
        params,
        legacy,
    } = match rpc::parse(&body) {
        Ok(parsed) => parsed,
        Err((id, e)) => {
            gw.metrics
                .calls
                .with_label_values(&["invalid", e.metric_label()])
                .inc();
            return axum::Json(rpc::error(&id, &e)).into_response();
        }
    };
    // A message naming a task follows up on it, which must be in the caller's scope: a
    // decision about the call it waits on needs the right to update Tasks; a reply to its
    // question (the next turn, a new Task) the right to create them.
    let follows_up = matches!(method, Method::SendMessage | Method::SendStreamingMessage)
        && params
            .pointer("/message/taskId")
            .is_some_and(|v| !v.is_null());
    let decides = follows_up && crate::decision::carries_decision(&params);
    let access = match method {
        Method::SendMessage | Method::SendStreamingMessage if decides => Access::DecideTasks,
        Method::SendMessage | Method::SendStreamingMessage => Access::CreateTasks,
        Method::GetTask | Method::SubscribeToTask => Access::GetTasks,
        Method::ListTasks => Access::ListTasks,
        Method::CancelTask => Access::CancelTasks,
    };
    if let Err(e) = gw
        .auth
        .allow(&who.0, &who.1, access, &namespace, &agent)
        .await
    {
        return refusal(&gw, &id, &e);
    }
    if let Err(e) = exposed(&gw, &namespace, &agent) {
        return refusal(&gw, &id, &e);
    }
    let t = Target {
        namespace: &namespace,
        agent: &agent,
    };
    let scope = match method {
        Method::SendMessage | Method::SendStreamingMessage if !follows_up => None,
        _ => match scope(&gw, &who, &namespace, &agent).await {
            Ok(s) => Some(s),
            Err(e) => return refusal(&gw, &id, &e),
        },
    };
    let scope = scope.unwrap_or(Scope::All);
    let caller = &who.0;
    let outcome = if method.streams() {
        let permit = match gw.limits.stream(&caller.username) {
            Ok(p) => p,
            Err(e) => return refusal(&gw, &id, &e),
        };
        let stream = match method {
            Method::SendStreamingMessage => gw
                .send_streaming(&t, caller, &scope, params, permit)
                .await
                .map(|s| s.boxed()),
            _ => gw
                .subscribe(&t, &scope, params, permit)
                .await
                .map(|s| s.boxed()),
        };
        match stream {
            Ok(s) => {
                gw.metrics
                    .calls
                    .with_label_values(&[method.name(), "ok"])
                    .inc();
                return a2a_sse(id, s, legacy).into_response();
            }
            Err(e) => Err(e),
        }
    } else {
        match method {
            Method::SendMessage => gw.send_message(&t, caller, &scope, params).await,
            Method::GetTask => gw.get_task(&t, &scope, params).await,
            Method::ListTasks => gw.list_tasks(&t, &scope, params).await,
            _ => gw.cancel_task(&t, &scope, params).await,
        }
    };
    match outcome {
        Ok(result) => {
            gw.metrics
                .calls
                .with_label_values(&[method.name(), "ok"])
                .inc();
            let result = match (legacy, method) {
                (false, _) | (true, Method::ListTasks) => result,
                (true, Method::SendMessage) => crate::legacy::send_result(result),
                (true, _) => crate::legacy::task(result),
            };
            axum::Json(rpc::result(&id, result)).into_response()
        }
        Err(e) => {
            log_kube(&e);
            gw.metrics
                .calls
                .with_label_values(&[method.name(), e.metric_label()])
                .inc();
            axum::Json(rpc::error(&id, &e)).into_response()
        }
    }
}

/// An A2A stream: each SSE `data` is a JSON-RPC response whose result is a stream response;
/// an error ends it as an `error` event carrying a JSON-RPC error.
fn a2a_sse(
    id: Value,
    items: impl Stream<Item = StreamItem> + Send + 'static,
    legacy: bool,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let events = items.map(move |item| {
        Ok(match item {
            StreamItem::Result(r) => {
                let mut result = serde_json::to_value(*r).unwrap_or_default();
                if legacy {
                    result = crate::legacy::stream_item(result);
                }
                SseEvent::default()
                    .json_data(rpc::result(&id, result))
                    .unwrap_or_default()
            }
            StreamItem::Error(message) => SseEvent::default()
                .event("error")
                .json_data(json!({"jsonrpc": "2.0", "id": id, "error": {"code": crate::error::code::INTERNAL, "message": message}}))
                .unwrap_or_default(),
        })
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

async fn task_events(
    State(gw): State<Arc<Gateway>>,
    Path((namespace, agent, id)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    let (parts, _) = req.into_parts();
    let who = match admit(&gw, &parts, Access::GetTasks, &namespace, &agent).await {
        Ok(who) => who,
        Err(e) => return refusal(&gw, &Value::Null, &e),
    };
    if let Err(e) = exposed(&gw, &namespace, &agent) {
        return refusal(&gw, &Value::Null, &e);
    }
    let scope = match scope(&gw, &who, &namespace, &agent).await {
        Ok(s) => s,
        Err(e) => return refusal(&gw, &Value::Null, &e),
    };
    let permit = match gw.limits.stream(&who.0.username) {
        Ok(p) => p,
        Err(e) => return refusal(&gw, &Value::Null, &e),
    };
    let t = Target {
        namespace: &namespace,
        agent: &agent,
    };
    match gw.events(&t, &scope, &id, permit).await {
        Ok(events) => {
            let events = events.map(|ev| {
                Ok::<_, Infallible>(
                    SseEvent::default()
                        .event(ev.name())
                        .json_data(&ev)
                        .unwrap_or_default(),
                )
            });
            Sse::new(events)
                .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
                .into_response()
        }
        Err(e) => {
            log_kube(&e);
            let status = match e {
                Error::TaskNotFound(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::BAD_GATEWAY,
            };
            (status, axum::Json(json!({"error": e.to_string()}))).into_response()
        }
    }
}
