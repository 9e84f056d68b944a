//! A mocked API server for the operator's reconcile tests and the worker's tests: a
//! `tower-test` service answered by a routing closure, recording every request so tests can
//! assert what was written.

use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// One request the code under test sent.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The `Accept` header: a metadata-only read asks for `PartialObjectMetadata` here.
    pub accept: Option<String>,
    pub body: Value,
}

pub type Log = Arc<Mutex<Vec<Recorded>>>;

/// A client whose requests are answered by `route(method, path, body) -> (status, body)`; the
/// route sees the path without the query.
pub fn mock_client<F>(route: F) -> (Client, Log)
where
    F: Fn(&str, &str, &Value) -> (u16, Value) + Send + 'static,
{
    serve(route, |uri| uri.path().to_owned())
}

/// As [`mock_client`], but the route sees the path and the query (`?watch=…`), for code whose
/// requests differ only there (a list and the watch after it).
pub fn mock_client_with_query<F>(route: F) -> (Client, Log)
where
    F: Fn(&str, &str, &Value) -> (u16, Value) + Send + 'static,
{
    serve(route, |uri| uri.to_string())
}

fn serve<F>(route: F, routed: fn(&http::Uri) -> String) -> (Client, Log)
where
    F: Fn(&str, &str, &Value) -> (u16, Value) + Send + 'static,
{
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let log: Log = Arc::default();
    let log2 = log.clone();
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().to_string();
            let uri = req.uri().to_string();
            let accept = req
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let path = routed(req.uri());
            let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (code, reply) = route(&method, &path, &body);
            if let Ok(mut l) = log2.lock() {
                l.push(Recorded {
                    method,
                    uri,
                    accept,
                    body,
                });
            }
            let resp = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&reply).unwrap_or_default()));
            if let Ok(resp) = resp {
                send.send_response(resp);
            }
        }
    });
    (Client::new(service, "default"), log)
}

/// A `Status` body for an error reply.
pub fn status(code: u16, reason: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": reason, "reason": reason, "code": code}),
    )
}

/// Requests matching a method and a path fragment.
pub fn find(log: &Log, method: &str, path_part: &str) -> Vec<Recorded> {
    log.lock()
        .map(|l| {
            l.iter()
                .filter(|r| r.method == method && r.uri.contains(path_part))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}
