//! The HTTP surface: cards, JSON-RPC, the plain event stream, and the probe port.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use tracing::warn;

use crate::auth::{Access, Caller};
use crate::card;
use crate::error::Error;
use crate::gateway::Gateway;
use crate::methods::{StreamItem, Target};
use crate::rpc::{self, Method};

/// Keep-alive comments on open streams: a vanished client is noticed by the failed write.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The A2A router.
pub fn router(gw: Arc<Gateway>, max_body_bytes: usize) -> Router {
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
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(gw)
}

/// `/healthz`, `/readyz` (both watches listed), `/metrics`.
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
                gw.metrics.render()
            }),
        )
        .with_state(gw)
}

/// An error before any method ran: its HTTP status with a JSON-RPC error body.
fn refusal(gw: &Gateway, id: &Value, e: &Error) -> Response {
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

/// Who is calling, within their rate, allowed `access` here.
async fn admit(
    gw: &Gateway,
    headers: &HeaderMap,
    access: Access,
    namespace: &str,
    agent: &str,
) -> Result<Caller, Error> {
    let (caller, key) = gw.auth.caller(headers).await?;
    gw.limits.request(&caller.username)?;
    gw.auth
        .allow(&caller, &key, access, namespace, agent)
        .await?;
    Ok(caller)
}

/// The exposed Agent `namespace/agent`, or `AgentNotFound`.
fn exposed(gw: &Gateway, namespace: &str, agent: &str) -> Result<Arc<ari_crds::Agent>, Error> {
    gw.hub
        .agent(namespace, agent)
        .filter(|a| card::exposed(a).is_some())
        .ok_or_else(|| Error::AgentNotFound(format!("{namespace}/{agent}")))
}

async fn agent_card(
    State(gw): State<Arc<Gateway>>,
    Path((namespace, agent)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let found = gw.hub.agent(&namespace, &agent);
    let a2a = found.as_deref().and_then(card::exposed).cloned();
    let public = a2a.as_ref().is_some_and(|a| a.public_card);
    // Without a public card, a caller must be allowed to read the Agent: an unauthenticated
    // caller learns nothing, not even whether the Agent exists.
    if !public && let Err(e) = admit(&gw, &headers, Access::GetAgent, &namespace, &agent).await {
        log_kube(&e);
        return refusal(&gw, &Value::Null, &e);
    }
    let (Some(agent_obj), Some(a2a)) = (found, a2a) else {
        return refusal(
            &gw,
            &Value::Null,
            &Error::AgentNotFound(format!("{namespace}/{agent}")),
        );
    };
    let base = if gw.public_url.is_empty() {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| {
                h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
            })
            .unwrap_or("localhost");
        format!("http://{host}")
    } else {
        gw.public_url.clone()
    };
    axum::Json(card::card(&agent_obj, &a2a, &base)).into_response()
}

fn log_kube(e: &Error) {
    if let Error::Kube(k) = e {
        warn!(error = %k, "API server call failed");
    }
}

async fn call(
    State(gw): State<Arc<Gateway>>,
    Path((namespace, agent)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let rpc::Parsed {
        id,
        method,
        params,
        legacy,
    } = match rpc::parse(&body) {
        Ok(parsed) => parsed,
        Err((id, e)) => {
            // Nothing is done for an unauthenticated caller, not even parsing errors told;
            // an authenticated one spends its rate on broken requests too.
            let checked = match gw.auth.caller(&headers).await {
                Ok((caller, _)) => gw.limits.request(&caller.username),
                Err(e) => Err(e),
            };
            if let Err(e) = checked {
                return refusal(&gw, &Value::Null, &e);
            }
            gw.metrics
                .calls
                .with_label_values(&["invalid", e.metric_label()])
                .inc();
            return axum::Json(rpc::error(&id, &e)).into_response();
        }
    };
    let access = match method {
        Method::SendMessage | Method::SendStreamingMessage => Access::CreateTasks,
        Method::GetTask | Method::SubscribeToTask => Access::GetTasks,
        Method::ListTasks => Access::ListTasks,
        Method::CancelTask => Access::CancelTasks,
    };
    let caller = match admit(&gw, &headers, access, &namespace, &agent).await {
        Ok(c) => c,
        Err(e) => {
            log_kube(&e);
            return refusal(&gw, &id, &e);
        }
    };
    if let Err(e) = exposed(&gw, &namespace, &agent) {
        return refusal(&gw, &id, &e);
    }
    let t = Target {
        namespace: &namespace,
        agent: &agent,
    };
    let outcome = if method.streams() {
        let permit = match gw.limits.stream(&caller.username) {
            Ok(p) => p,
            Err(e) => return refusal(&gw, &id, &e),
        };
        let stream = match method {
            Method::SendStreamingMessage => gw
                .send_streaming(&t, &caller, params, permit)
                .await
                .map(|s| s.boxed()),
            _ => gw.subscribe(&t, params, permit).await.map(|s| s.boxed()),
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
            Method::SendMessage => gw.send_message(&t, &caller, params).await,
            Method::GetTask => gw.get_task(&t, params).await,
            Method::ListTasks => gw.list_tasks(&t, params).await,
            _ => gw.cancel_task(&t, params).await,
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
    headers: HeaderMap,
) -> Response {
    let caller = match admit(&gw, &headers, Access::GetTasks, &namespace, &agent).await {
        Ok(c) => c,
        Err(e) => {
            log_kube(&e);
            return refusal(&gw, &Value::Null, &e);
        }
    };
    if let Err(e) = exposed(&gw, &namespace, &agent) {
        return refusal(&gw, &Value::Null, &e);
    }
    let permit = match gw.limits.stream(&caller.username) {
        Ok(p) => p,
        Err(e) => return refusal(&gw, &Value::Null, &e),
    };
    let t = Target {
        namespace: &namespace,
        agent: &agent,
    };
    match gw.events(&t, &id, permit).await {
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
