//! The `network` capability: outgoing HTTP through a real client (ureq), with
//! every hop, redirects included, checked against the allow-list.
//!
//! ureq's own redirect following is off; we follow up to `max_redirects`
//! ourselves so a redirect can never reach a host the agent was not granted.
//! No ambient proxy settings are honoured. Bytes are metered both ways per hop
//! by a fixed formula (see `docs/capabilities.md`), and every hop's response
//! (or transport error) is recorded, so a replay needs no network.
//!
//! The body cap counts *decoded* bytes (ureq decodes gzip outside its own limit, so a small
//! compressed response could otherwise inflate without bound), and each hop's timeout is
//! `min(timeout, time left before the task's deadline)`: a host call cannot outlive the task.

/// The allow-list grammar is the model's: the operator validated the very same entries.
pub use ari_model::hosts as allowlist;
mod events;
mod link;
pub use events::HttpEvent;
pub use link::FUEL;

use std::io::Read;
use std::time::{Duration, Instant};

use url::Url;

use ari_model::CapabilityName;
use ari_model::approval::CallSubject;

use super::approval::{ApprovalGate, Verdict};
use super::{CapError, CapUsage, Capability, Grants, TaskSetup};
use crate::cancel::{CancelToken, Interrupted, run_cancellable};
use crate::host::HostFunctions;
use crate::trace::{Recorder, mismatch};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Per-request ceilings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest response body read, per hop.
    pub max_response_bytes: u64,
    /// Whole-request timeout, per hop (connect, send, receive).
    pub timeout: Duration,
    pub max_redirects: u32,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_response_bytes: 4 * 1024 * 1024,
            timeout: Duration::from_secs(30),
            max_redirects: 5,
        }
    }
}

/// Headers the client owns; a guest may not set them (framing, hop-by-hop, routing).
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-connection",
];

/// Credentials that must not follow a redirect to another origin.
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "cookie"];

/// Headers whose values a call id leaves out (only their names count): credentials, which no
/// hash of a person-visible id should be computed from.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "cookie",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-auth-token",
];

/// Most bytes of a request body handed to the approver to show (it cuts further).
const BODY_PREVIEW: usize = 1024;

pub struct HttpCapability {
    grant: Option<allowlist::AllowList>,
    /// Hosts whose requests wait for a person's decision (`None`: none).
    approval_hosts: Option<allowlist::AllowList>,
    approvals: ApprovalGate,
    limits: HttpLimits,
    /// The task's cancel token: an exchange in flight returns as soon as it fires.
    cancel: CancelToken,
    /// The task's deadline; no hop may run past it.
    deadline: Option<Instant>,
    bytes: u64,
}

/// How a hop the task's deadline cut short ([`CapError::DeadlineExceeded`]) is written in the
/// trace, which keeps transport errors as text; replay reads it back as that variant, so the
/// host ends the task with the deadline trap live and in replay alike.
pub const DEADLINE_ERROR: &str = "http: task deadline exceeded";

/// Logical bytes of a request: `METHOD SP URL SP HTTP/1.1 CRLF`, `name: value CRLF` each, `CRLF`, body.
pub fn request_bytes(method: &str, url: &str, headers: &[(String, String)], body: &[u8]) -> u64 {
    let head: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    (method.len() + 1 + url.len() + 11 + head + 2 + body.len()) as u64
}

/// Logical bytes of a response: `HTTP/1.1 NNN CRLF` (14), headers as above, `CRLF`, body.
pub fn response_bytes(resp: &HttpResponse) -> u64 {
    let head: usize = resp
        .headers
        .iter()
        .map(|(n, v)| n.len() + v.len() + 4)
        .sum();
    (14 + head + 2 + resp.body.len()) as u64
}

fn failed(msg: impl std::fmt::Display) -> CapError {
    CapError::Failed(format!("http: {msg}"))
}

/// A malformed request the guest built; refused before anything is sent or recorded.
fn invalid(msg: impl std::fmt::Display) -> CapError {
    CapError::Invalid(format!("http: {msg}"))
}

fn sanitize(headers: Vec<(String, String)>) -> Result<Vec<(String, String)>, CapError> {
    let mut out = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let name = ureq::http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| invalid(format!("invalid header name `{name}`")))?;
        ureq::http::HeaderValue::from_str(&value)
            .map_err(|_| invalid(format!("invalid value for header `{name}`")))?;
        if !RESERVED_HEADERS.contains(&name.as_str()) {
            out.push((name.as_str().to_owned(), value));
        }
    }
    Ok(out)
}

impl HttpCapability {
    pub fn new(grant: Option<allowlist::AllowList>, limits: HttpLimits) -> Self {
        Self {
            grant,
            approval_hosts: None,
            approvals: ApprovalGate::new(None, CancelToken::new()),
            limits,
            cancel: CancelToken::new(),
            deadline: None,
            bytes: 0,
        }
    }

    pub fn set_limits(&mut self, limits: HttpLimits) {
        self.limits = limits;
    }

    /// Bytes metered both ways so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn request(
        &mut self,
        req: HttpRequest,
        rec: &mut Recorder,
    ) -> Result<HttpResponse, CapError> {
        let Some(grant) = self.grant.clone() else {
            return Err(CapError::not_granted("network"));
        };
        let mut method = ureq::http::Method::from_bytes(req.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| invalid(format!("invalid method `{}`", req.method)))?
            .to_string();
        let mut url = req.url;
        let mut headers = sanitize(req.headers)?;
        let mut body = req.body;
        let mut hop = 0u32;
        loop {
            let parsed = grant.check(&url).map_err(|reason| {
                if hop == 0 {
                    CapError::Denied(reason.to_string())
                } else {
                    CapError::Denied(format!("redirect hop {hop}: {reason}"))
                }
            })?;
            if self
                .approval_hosts
                .as_ref()
                .is_some_and(|hosts| hosts.check(parsed.as_str()).is_ok())
            {
                self.approve(&method, &parsed, &headers, &body, rec)?;
            }
            self.bytes += request_bytes(&method, parsed.as_str(), &headers, &body);
            let resp = self.exchange(&method, &parsed, &headers, &body, rec)?;
            self.bytes += response_bytes(&resp);
            let location = resp
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("location"))
                .map(|(_, v)| v.clone());
            let (true, Some(location)) =
                (matches!(resp.status, 301 | 302 | 303 | 307 | 308), location)
            else {
                return Ok(resp);
            };
            if hop >= self.limits.max_redirects {
                return Err(failed(format!(
                    "too many redirects (more than {})",
                    self.limits.max_redirects
                )));
            }
            hop += 1;
            let next = parsed
                .join(&location)
                .map_err(|e| failed(format!("bad redirect location `{location}`: {e}")))?;
            if next.origin() != parsed.origin() {
                headers.retain(|(n, _)| !CREDENTIAL_HEADERS.contains(&n.as_str()));
            }
            let to_get = resp.status == 303 && method != "HEAD"
                || matches!(resp.status, 301 | 302) && method == "POST";
            if to_get {
                method = "GET".into();
                body.clear();
                headers.retain(|(n, _)| !n.starts_with("content-"));
            }
            url = next.to_string();
        }
    }

    /// Waits for a person's decision about one hop to a host the grant marks (a replay reads
    /// it from the trace); nothing is sent before. The call is named by the method, the URL
    /// (without password), the headers (a credential's name only) and the body's digest.
    fn approve(
        &mut self,
        method: &str,
        url: &Url,
        headers: &[(String, String)],
        body: &[u8],
        rec: &mut Recorder,
    ) -> Result<(), CapError> {
        let mut shown = url.clone();
        // Only fails for URLs that cannot have a password, which then have none.
        let _ = shown.set_password(None);
        let headers: String = headers
            .iter()
            .map(|(name, value)| {
                if SECRET_HEADERS.contains(&name.as_str()) {
                    format!("{name}\n")
                } else {
                    format!("{name}: {value}\n")
                }
            })
            .collect();
        let body_sha256 = crate::attestation::sha256_hex(body);
        let request = self.approvals.request(
            CallSubject::Network {
                method: method.to_owned(),
                url: shown.to_string(),
            },
            &[
                b"network",
                method.as_bytes(),
                shown.as_str().as_bytes(),
                headers.as_bytes(),
                body_sha256.as_bytes(),
            ],
            String::from_utf8_lossy(&body[..body.len().min(BODY_PREVIEW)]).into_owned(),
        );
        match self.approvals.decide::<HttpEvent>(&request, rec)? {
            Verdict::Approved => Ok(()),
            Verdict::Rejected(why) => Err(CapError::Rejected(why)),
            Verdict::Deadline => Err(CapError::DeadlineExceeded),
        }
    }

    /// One hop: over the network (recorded) or from the trace (replay).
    fn exchange(
        &mut self,
        method: &str,
        url: &Url,
        headers: &[(String, String)],
        body: &[u8],
        rec: &mut Recorder,
    ) -> Result<HttpResponse, CapError> {
        if rec.is_replay() {
            let event: HttpEvent = rec.replay_next(&[HttpEvent::EXCHANGE, HttpEvent::ERROR])?;
            let (m, u) = match &event {
                HttpEvent::Exchange { method, url, .. } | HttpEvent::Error { method, url, .. } => {
                    (method.as_str(), url.as_str())
                }
                HttpEvent::Approval { .. } | HttpEvent::ApprovalDeadline => {
                    return Err(crate::trace::internal_kind_mismatch());
                }
            };
            if m != method || u != url.as_str() {
                return Err(mismatch(
                    "http request",
                    &format!("{m} {u}"),
                    &format!("{method} {url}"),
                ));
            }
            return match event {
                HttpEvent::Exchange {
                    status,
                    headers,
                    body,
                    ..
                } => Ok(HttpResponse {
                    status,
                    headers,
                    body,
                }),
                // The trace keeps errors as text; the one the runtime acts on comes back typed.
                HttpEvent::Error { error, .. } if error == DEADLINE_ERROR => {
                    Err(CapError::DeadlineExceeded)
                }
                HttpEvent::Error { error, .. } => Err(CapError::Failed(error)),
                HttpEvent::Approval { .. } | HttpEvent::ApprovalDeadline => {
                    Err(crate::trace::internal_kind_mismatch())
                }
            };
        }
        let result = self.send(method, url, headers, body);
        // A cancelled task keeps nothing: its trace is never signed or replayed.
        if matches!(result, Err(CapError::Cancelled)) {
            return result;
        }
        rec.record(match &result {
            Ok(r) => HttpEvent::Exchange {
                method: method.to_owned(),
                url: url.to_string(),
                status: r.status,
                headers: r.headers.clone(),
                body: r.body.clone(),
            },
            Err(e) => HttpEvent::Error {
                method: method.to_owned(),
                url: url.to_string(),
                error: e.to_string(),
            },
        });
        result
    }

    /// A client for one hop, its timeout cut to what is left of the task (`None` when nothing
    /// is left). Built per hop: the remaining time shrinks with every call.
    fn agent(&self) -> Option<ureq::Agent> {
        let timeout = match self.deadline {
            Some(deadline) => self
                .limits
                .timeout
                .min(deadline.saturating_duration_since(Instant::now())),
            None => self.limits.timeout,
        };
        if timeout.is_zero() {
            return None;
        }
        Some(
            ureq::Agent::config_builder()
                .max_redirects(0)
                .http_status_as_error(false)
                .timeout_global(Some(timeout))
                .proxy(None)
                .user_agent("ari-executor")
                .build()
                .into(),
        )
    }

    fn deadline_passed(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn send(
        &mut self,
        method: &str,
        url: &Url,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<HttpResponse, CapError> {
        let mut builder = ureq::http::Request::builder()
            .method(method)
            .uri(url.as_str());
        for (n, v) in headers {
            builder = builder.header(n.as_str(), v.as_str());
        }
        let request = builder
            .body(body.to_vec())
            .map_err(|e| failed(format!("invalid request: {e}")))?;
        let Some(agent) = self.agent() else {
            return Err(CapError::DeadlineExceeded);
        };
        let max = self.limits.max_response_bytes;
        match run_cancellable(&self.cancel, move || fetch(&agent, request, max)) {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(Fetch::TooLarge(e))) => Err(e),
            Ok(Err(Fetch::Transport(_))) if self.deadline_passed() => {
                Err(CapError::DeadlineExceeded)
            }
            Ok(Err(Fetch::Transport(e))) => Err(failed(e)),
            Err(Interrupted::Cancelled) => Err(CapError::Cancelled),
            Err(Interrupted::Failed(e)) => Err(failed(e)),
        }
    }
}

/// How one exchange failed on its own thread.
enum Fetch {
    /// The body is over the limit (after decoding).
    TooLarge(CapError),
    /// Connect, send or receive failed (or timed out).
    Transport(String),
}

/// One exchange: sends `request` and reads at most `max` decoded bytes of the body.
fn fetch(
    agent: &ureq::Agent,
    request: ureq::http::Request<Vec<u8>>,
    max: u64,
) -> Result<HttpResponse, Fetch> {
    let response = agent
        .run(request)
        .map_err(|e| Fetch::Transport(e.to_string()))?;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    // Cap the decoded bytes: read at most max + 1 through the decoder, never more.
    let mut body = Vec::new();
    response
        .into_body()
        .into_reader()
        .take(max.saturating_add(1))
        .read_to_end(&mut body)
        .map_err(|e| Fetch::Transport(e.to_string()))?;
    if body.len() as u64 > max {
        return Err(Fetch::TooLarge(failed(format!(
            "response body exceeds {max} bytes (after decoding)"
        ))));
    }
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

impl Capability for HttpCapability {
    const GRANT: Option<CapabilityName> = Some(CapabilityName::Network);
    const HOST: HostFunctions = link::HOST;

    fn for_task(grants: &Grants, task: &mut TaskSetup) -> Self {
        let mut http = Self::new(grants.hosts().cloned(), HttpLimits::default());
        http.cancel = task.cancel.clone();
        http.approval_hosts = grants.approval_hosts().cloned();
        http.approvals = ApprovalGate::for_task(task);
        http
    }

    /// Bounds every later hop (and every wait for a decision) by `deadline`.
    fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
        self.approvals.set_deadline(deadline);
    }

    fn add_usage(&self, usage: &mut CapUsage) {
        usage.network_bytes = self.bytes();
    }
}
