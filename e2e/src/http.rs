//! Plain-HTTP GET for health checks (etcd) and readiness probes (pods).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// GETs `url` and returns the status code and body, or why it failed.
pub(crate) async fn get(url: &str, timeout: Duration) -> Result<(u16, String), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("bad url {url}: {e}"))?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let fut = async {
        let resp = client.get(uri).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| format!("GET {url} timed out"))?
}
