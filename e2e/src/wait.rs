//! Polling with a deadline: the only synchronisation tests use (never fixed sleeps).

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Default deadline for cluster-side effects on a loaded machine.
pub const DEFAULT: Duration = Duration::from_secs(90);

/// Calls `check` every 200 ms until it returns `Ok`, or fails after `timeout` with the last
/// `Err` it returned (which should describe what was observed instead).
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                secs: timeout.as_secs(),
                detail: last,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What a condition must be: its type, status and, when given, reason.
pub struct Wanted<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: Option<&'a str>,
}

/// Waits until object `name` of `api` has the condition `wanted` among `conditions(object)`;
/// returns the object and the condition's message.
pub async fn condition<K>(
    api: &kube::Api<K>,
    name: &str,
    wanted: Wanted<'_>,
    conditions: impl Fn(&K) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
) -> Result<(K, String)>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Wanted {
        type_,
        status,
        reason,
    } = wanted;
    let what = format!(
        "{name} {type_}={status} ({})",
        reason.unwrap_or("any reason")
    );
    until(&what, DEFAULT, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let found = conditions(&object).into_iter().find(|c| c.type_ == type_);
        match found {
            Some(c) if c.status == status && reason.is_none_or(|r| c.reason == r) => {
                Ok((object, c.message))
            }
            other => Err(format!("{type_}: {other:?}")),
        }
    })
    .await
}

/// Waits until object `name` of `api` has its `Ready` condition at `status` with `reason`
/// (a probed resource: a ModelConfig, an MCPServer); returns the object.
pub async fn ready<K>(
    api: &kube::Api<K>,
    name: &str,
    (status, reason): (&str, &str),
    conditions: impl Fn(&K) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
) -> Result<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let wanted = Wanted {
        type_: "Ready",
        status,
        reason: Some(reason),
    };
    Ok(condition(api, name, wanted, conditions).await?.0)
}
