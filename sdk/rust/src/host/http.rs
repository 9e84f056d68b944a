//! Outgoing HTTP (capability `network`). The host checks every hop, redirects included,
//! against the agent's allowed hosts and meters the bytes both ways.

use super::wit;
use crate::Error;

/// An HTTP request; build it with [`Request::new`], [`Request::get`] or [`Request::post`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// A request with `method` to `url`, no headers and an empty body.
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            method: method.to_string(),
            url: url.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A `GET` request.
    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    /// A `POST` request carrying `body`.
    pub fn post(url: &str, body: impl Into<Vec<u8>>) -> Self {
        Self::new("POST", url).body(body)
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Replaces the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sends the request; see [`request`].
    pub fn send(self) -> Result<Response, Error> {
        request(self)
    }
}

/// An HTTP response (after redirects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name`, compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as UTF-8 text.
    pub fn text(&self) -> Result<&str, Error> {
        std::str::from_utf8(&self.body)
            .map_err(|e| Error::Invalid(format!("response body is not UTF-8: {e}")))
    }
}

/// `GET url`.
pub fn get(url: &str) -> Result<Response, Error> {
    request(Request::get(url))
}

/// Sends `req`. A status such as 404 is a successful call; only refused or failed transfers
/// (host not allowed, connection error, limit reached) are errors.
pub fn request(req: Request) -> Result<Response, Error> {
    wit::http_request(&req.into())
        .map(Response::from)
        .map_err(Error::from)
}

impl From<Request> for wit::OutgoingRequest {
    fn from(r: Request) -> Self {
        Self {
            method: r.method,
            url: r.url,
            headers: r
                .headers
                .into_iter()
                .map(|(name, value)| wit::HttpHeader { name, value })
                .collect(),
            body: r.body,
        }
    }
}

impl From<wit::IncomingResponse> for Response {
    fn from(r: wit::IncomingResponse) -> Self {
        Self {
            status: r.status,
            headers: r.headers.into_iter().map(|h| (h.name, h.value)).collect(),
            body: r.body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_builder_and_response_helpers() {
        let req: wit::OutgoingRequest = Request::post("https://a.example/x", "b")
            .header("Content-Type", "text/plain")
            .into();
        assert_eq!(req.method, "POST");
        assert_eq!(req.headers[0].name, "Content-Type");
        assert_eq!(req.body, b"b");

        let resp = Response::from(wit::IncomingResponse {
            status: 201,
            headers: vec![wit::HttpHeader {
                name: "Content-Type".into(),
                value: "a/b".into(),
            }],
            body: b"ok".to_vec(),
        });
        assert_eq!(resp.header("content-type"), Some("a/b"));
        assert!(resp.is_success());
        assert_eq!(resp.text(), Ok("ok"));
    }
}
