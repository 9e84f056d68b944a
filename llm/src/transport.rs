//! One HTTP exchange with a provider, retried on 429 and 5xx within the call's deadline, with
//! every answer read under a size bound and an idle timeout.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::dns::Resolve;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;

use crate::endpoint::Endpoint;
use crate::error::ModelError;

/// Ceilings of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest answer read (a whole body, or a stream's text); beyond it the call fails.
    pub max_response_bytes: usize,
    /// Largest request body sent.
    pub max_request_bytes: usize,
    /// A provider that accepts no connection within this is down.
    pub connect_timeout: Duration,
    /// Longest silence while waiting for the head or the next bytes of an answer: a stalled
    /// answer fails after this, even if the deadline is further away.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_response_bytes: 4 << 20,
            max_request_bytes: 4 << 20,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

/// How 429 and 5xx answers (and refused connections) are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The wait after the first failure; doubled after each further one.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
        }
    }
}

/// Error bodies are read only this far (their message is cut much shorter anyway).
const MAX_ERROR_BYTES: usize = 64 << 10;

/// Whether a status is worth another attempt: rate limits, server errors a restart or a
/// moment fixes, and Anthropic's "overloaded" (529).
pub fn retryable(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// The wait before attempt `attempt + 1` (0-based `attempt` just failed) when the provider
/// names none.
pub fn backoff(policy: RetryPolicy, attempt: u32) -> Duration {
    policy
        .initial_backoff
        .saturating_mul(2u32.saturating_pow(attempt))
        .min(policy.max_backoff)
}

/// What to do after attempt `attempt` (0-based) failed with a retryable answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Retry(Duration),
    GiveUp,
}

/// Retry after the provider's `retry_after` (or the backoff) unless attempts are used up or
/// the wait would end past the deadline (`left` is the time until it).
pub fn next_step(
    policy: RetryPolicy,
    attempt: u32,
    retry_after: Option<Duration>,
    left: Duration,
) -> Next {
    if attempt + 1 >= policy.max_attempts {
        return Next::GiveUp;
    }
    let wait = retry_after.unwrap_or_else(|| backoff(policy, attempt));
    if wait >= left {
        Next::GiveUp
    } else {
        Next::Retry(wait)
    }
}

/// The wait a provider asks for: OpenAI's `retry-after-ms`, else `retry-after` as seconds or an
/// HTTP date (relative to `now`).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The HTTP client of every model call.
#[derive(Clone)]
pub(crate) struct Transport {
    http: reqwest::Client,
    pub(crate) limits: Limits,
    retry: RetryPolicy,
}

/// A successful answer's head; the body is read by the caller (whole or as a stream).
pub(crate) struct Answer {
    pub(crate) response: reqwest::Response,
}

impl Transport {
    pub(crate) fn new(
        limits: Limits,
        retry: RetryPolicy,
        resolver: Option<Arc<dyn Resolve>>,
    ) -> Result<Transport, ModelError> {
        // rustls needs a process-wide crypto provider; ring is the one this workspace builds.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            // A redirect would carry the key to wherever it points.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(limits.connect_timeout)
            .user_agent(concat!("ari/", env!("CARGO_PKG_VERSION")));
        if let Some(resolver) = resolver {
            builder = builder.dns_resolver(resolver);
        }
        let http = builder
            .build()
            .map_err(|e| ModelError::unavailable(format!("building the HTTP client: {e}")))?;
        Ok(Transport {
            http,
            limits,
            retry,
        })
    }

    /// POSTs `body` to `path` under `endpoint`, retrying as [`RetryPolicy`] says until
    /// `deadline`; returns the first 2xx answer. Dropping the future abandons the call.
    pub(crate) async fn post(
        &self,
        endpoint: &Endpoint,
        path: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Vec<u8>,
        deadline: Instant,
    ) -> Result<Answer, ModelError> {
        if body.len() > self.limits.max_request_bytes {
            return Err(ModelError::invalid(format!(
                "the request is {} bytes, more than the {} allowed",
                body.len(),
                self.limits.max_request_bytes
            )));
        }
        let url = endpoint.url(path);
        let mut attempt = 0;
        loop {
            let mut request = self
                .http
                .post(url.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
            for (name, value) in headers {
                request = request.header(name, value.clone());
            }
            let failure = match self.within(deadline, request.send()).await? {
                Ok(response) if response.status().is_success() => return Ok(Answer { response }),
                Ok(response) => self.refusal(endpoint, response, deadline).await?,
                Err(e) if e.is_connect() => Failure {
                    retry_after: None,
                    error: ModelError::unavailable(endpoint.redact(&format!(
                        "cannot connect to {}: {}",
                        url.host_str().unwrap_or_default(),
                        source_text(&e)
                    ))),
                },
                Err(e) => {
                    return Err(ModelError::unavailable(
                        endpoint.redact(&format!("the request failed: {}", source_text(&e))),
                    ));
                }
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match next_step(self.retry, attempt, failure.retry_after, left) {
                Next::Retry(wait) => tokio::time::sleep(wait).await,
                Next::GiveUp => return Err(failure.error),
            }
            attempt += 1;
        }
    }

    /// One GET of `path` under `endpoint`, not retried and not redirected, whatever its
    /// status; bounded by the idle timeout and `deadline`.
    pub(crate) async fn get(
        &self,
        endpoint: &Endpoint,
        path: &str,
        headers: &[(HeaderName, HeaderValue)],
        deadline: Instant,
    ) -> Result<reqwest::Response, ModelError> {
        let mut request = self.http.get(endpoint.url(path));
        for (name, value) in headers {
            request = request.header(name, value.clone());
        }
        self.within(deadline, request.send())
            .await?
            .map_err(|e| ModelError::unavailable(endpoint.redact(&source_text(&e))))
    }

    /// Turns a non-2xx answer into its error, or `Err` at once when it is not retryable.
    async fn refusal(
        &self,
        endpoint: &Endpoint,
        response: reqwest::Response,
        deadline: Instant,
    ) -> Result<Failure, ModelError> {
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let body = self
            .read_body(response, MAX_ERROR_BYTES, deadline)
            .await
            .unwrap_or_default();
        let message = endpoint.redact(&error_message(&body).unwrap_or_else(|| {
            reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no message")
                .to_string()
        }));
        let error = match status {
            429 => ModelError::rate_limited(retry_after, message),
            400 | 404 | 413 | 422 => ModelError::invalid(message),
            _ => ModelError::provider(status, message),
        };
        if retryable(status) {
            Ok(Failure { retry_after, error })
        } else {
            Err(error)
        }
    }

    /// The whole body, at most `max` bytes, each read within the idle timeout and the deadline.
    pub(crate) async fn read_body(
        &self,
        mut response: reqwest::Response,
        max: usize,
        deadline: Instant,
    ) -> Result<Vec<u8>, ModelError> {
        let status = response.status().as_u16();
        if response.content_length().is_some_and(|n| n > max as u64) {
            return Err(too_large(status, max));
        }
        let mut body = Vec::new();
        while let Some(chunk) = self.next_chunk(&mut response, deadline).await? {
            if body.len() + chunk.len() > max {
                return Err(too_large(status, max));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The next bytes of `response`, or an error when none come within the idle timeout.
    pub(crate) async fn next_chunk(
        &self,
        response: &mut reqwest::Response,
        deadline: Instant,
    ) -> Result<Option<Vec<u8>>, ModelError> {
        match self.within(deadline, response.chunk()).await? {
            Ok(chunk) => Ok(chunk.map(|c| c.to_vec())),
            Err(e) => Err(ModelError::unavailable(format!(
                "reading the answer failed: {}",
                source_text(&e)
            ))),
        }
    }

    /// `work`, cut short by the idle timeout or the deadline, whichever is sooner.
    async fn within<T>(
        &self,
        deadline: Instant,
        work: impl Future<Output = T>,
    ) -> Result<T, ModelError> {
        let idle_end = Instant::now() + self.limits.idle_timeout;
        let end = idle_end.min(deadline);
        tokio::time::timeout_at(end, work).await.map_err(|_| {
            ModelError::unavailable(if end == deadline {
                "no answer before the call's deadline".to_string()
            } else {
                format!(
                    "the provider sent nothing for {} s",
                    self.limits.idle_timeout.as_secs_f32()
                )
            })
        })
    }
}

/// A retryable failure and the wait the provider asked for.
struct Failure {
    retry_after: Option<Duration>,
    error: ModelError,
}

fn too_large(status: u16, max: usize) -> ModelError {
    ModelError::provider(status, format!("the answer is larger than {max} bytes"))
}

/// The error's innermost cause: reqwest's own text names the URL, its sources say why.
fn source_text(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text = s.to_string();
        source = s.source();
    }
    text
}

/// The message of an error body in either provider's shape (`{"error": {"message": ...}}`,
/// `{"error": "..."}`, `{"message": ...}`), or its first line if it is not JSON.
pub(crate) fn error_message(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let line = text.lines().find(|l| !l.trim().is_empty())?;
            return Some(line.to_string());
        }
    };
    let error = value.get("error").unwrap_or(&value);
    error
        .get("message")
        .and_then(|m| m.as_str())
        .or_else(|| error.as_str())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_decisions() {
        let policy = RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(250),
        };
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        #[rustfmt::skip]
        let cases = [
            // what,                                 attempt, retry-after, left,  next
            ("first failure backs off",              0, None,        s(10), Next::Retry(ms(100))),
            ("second doubles",                       1, None,        s(10), Next::Retry(ms(200))),
            ("provider's wait wins",                 0, Some(s(2)),  s(10), Next::Retry(s(2))),
            ("attempts used up",                     2, None,        s(10), Next::GiveUp),
            ("wait would pass the deadline",         0, Some(s(20)), s(10), Next::GiveUp),
            ("backoff would pass the deadline",      0, None,        ms(50), Next::GiveUp),
        ];
        for (what, attempt, after, left, want) in cases {
            assert_eq!(next_step(policy, attempt, after, left), want, "{what}");
        }
        assert_eq!(backoff(policy, 5), ms(250), "capped");
        assert_eq!(backoff(policy, 40), ms(250), "no overflow");
    }

    #[test]
    fn retry_after_in_each_form() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        type Case<'a> = (Vec<(&'static str, &'a str)>, Option<Duration>);
        let cases: Vec<Case> = vec![
            (vec![("retry-after", "7")], Some(Duration::from_secs(7))),
            (
                vec![("retry-after", "1.5")],
                Some(Duration::from_millis(1500)),
            ),
            (vec![("retry-after", &later)], Some(Duration::from_secs(30))),
            (
                vec![("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")],
                Some(Duration::ZERO),
            ),
            (
                vec![("retry-after-ms", "250"), ("retry-after", "9")],
                Some(Duration::from_millis(250)),
            ),
            (vec![("retry-after", "soon")], None),
            (vec![("retry-after", "-3")], None),
            (vec![], None),
        ];
        for (headers, want) in cases {
            let mut map = HeaderMap::new();
            for (n, v) in &headers {
                map.insert(
                    HeaderName::from_static(n),
                    HeaderValue::from_str(v).expect("header"),
                );
            }
            assert_eq!(retry_after(&map, now), want, "{headers:?}");
        }
    }

    #[test]
    fn error_messages_in_each_shape() {
        let cases: &[(&[u8], Option<&str>)] = &[
            (
                br#"{"error":{"message":"bad key","type":"x"}}"#,
                Some("bad key"),
            ),
            (
                br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                Some("Overloaded"),
            ),
            (br#"{"error":"nope"}"#, Some("nope")),
            (br#"{"message":"m"}"#, Some("m")),
            (
                b"\n<html>Bad Gateway</html>\nmore",
                Some("<html>Bad Gateway</html>"),
            ),
            (br#"{"detail":1}"#, None),
            (b"", None),
        ];
        for (body, want) in cases {
            assert_eq!(error_message(body).as_deref(), *want);
        }
    }

    #[test]
    fn which_statuses_are_retried() {
        for s in [408, 429, 500, 502, 503, 504, 529] {
            assert!(retryable(s), "{s}");
        }
        for s in [200, 400, 401, 403, 404, 413, 422, 501] {
            assert!(!retryable(s), "{s}");
        }
    }
}
