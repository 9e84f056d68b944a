//! A remote MCP server: where it is, which protocol revision to speak, and its credentials.

use std::fmt;

use ari_model::secret::Secret;
use serde::{Deserialize, Serialize};
use url::Url;

/// Which revision of MCP's streamable HTTP transport to speak: the model crate's, as
/// `MCPServer` resources and `ari run --mcp-protocol` name it.
pub use ari_model::McpProtocol as Protocol;

/// Headers the transport owns: a credential header of these names would be ignored or break
/// the protocol.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "authorization",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-method",
    "mcp-name",
    "mcp-protocol-version",
    "mcp-session-id",
    "transfer-encoding",
];

/// What a server is sent to prove who calls it. Every value is a [`Secret`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    bearer: Option<Secret>,
    headers: Vec<(String, Secret)>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header names are not secret; values print redacted.
        f.debug_struct("Credentials")
            .field("bearer", &self.bearer)
            .field("headers", &self.headers)
            .finish()
    }
}

/// A server declaration the host refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool server `{server}`: {reason}")]
pub struct BadServer {
    pub server: String,
    pub reason: String,
}

impl Credentials {
    /// Sent as `Authorization: Bearer <token>`.
    pub fn with_bearer(mut self, token: Secret) -> Credentials {
        self.bearer = Some(token);
        self
    }

    /// Sent as header `name`. Names the transport owns (`authorization`, `content-type`,
    /// `mcp-session-id`, ...) are refused, as are names or values a header cannot hold; the
    /// message never shows the value.
    pub fn with_header(mut self, name: &str, value: Secret) -> Result<Credentials, String> {
        let name = name.trim().to_ascii_lowercase();
        if RESERVED_HEADERS.contains(&name.as_str()) {
            return Err(format!("header `{name}` is the transport's own"));
        }
        reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("`{name}` is not a header name"))?;
        reqwest::header::HeaderValue::from_str(value.expose()).map_err(|_| {
            format!("the value of header `{name}` holds characters a header cannot")
        })?;
        self.headers.push((name, value));
        Ok(self)
    }

    pub(crate) fn bearer(&self) -> Option<&Secret> {
        self.bearer.as_ref()
    }

    pub(crate) fn headers(&self) -> &[(String, Secret)] {
        &self.headers
    }

    /// `text` with every credential cut out.
    pub fn redact(&self, text: &str) -> String {
        let mut text = text.to_string();
        for secret in self
            .bearer
            .iter()
            .chain(self.headers.iter().map(|(_, v)| v))
        {
            text = secret.redact(&text);
        }
        text
    }
}

/// One MCP server as a namespace declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolServer {
    /// The name Agents are granted it by, and guests call it by.
    pub name: String,
    /// The streamable HTTP endpoint (`http://127.0.0.1:8000/mcp`).
    pub url: Url,
    pub protocol: Protocol,
    pub credentials: Credentials,
}

/// What a record says answered: the server's name and its URL without user, password, query
/// or fragment (a token written into the URL stays out of the trace too).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerId {
    pub name: String,
    pub url: String,
}

impl ToolServer {
    /// A server at `url`, which must be `http` or `https`.
    pub fn new(name: impl Into<String>, url: Url) -> Result<ToolServer, BadServer> {
        let name = name.into();
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(BadServer {
                server: name,
                reason: "the URL must be http:// or https:// with a host".into(),
            });
        }
        Ok(ToolServer {
            name,
            url,
            protocol: Protocol::default(),
            credentials: Credentials::default(),
        })
    }

    pub fn with_protocol(mut self, protocol: Protocol) -> ToolServer {
        self.protocol = protocol;
        self
    }

    pub fn with_credentials(mut self, credentials: Credentials) -> ToolServer {
        self.credentials = credentials;
        self
    }

    /// The server as records, `limitsApplied` and attestations name it.
    pub fn id(&self) -> ServerId {
        ServerId {
            name: self.name.clone(),
            url: public_url(&self.url),
        }
    }

    /// `text` with the server's credentials, and the URL's own, cut out.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut text = self.credentials.redact(text);
        for part in [self.url.password(), self.url.query()]
            .into_iter()
            .flatten()
        {
            if !part.is_empty() {
                text = text.replace(part, ari_model::secret::REDACTED);
            }
        }
        text
    }
}

/// `url` without user, password, query or fragment.
pub fn public_url(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "mcp-token-0123456789";

    #[test]
    fn credentials_never_print_and_are_cut_from_text() {
        let creds = Credentials::default()
            .with_bearer(Secret::new(TOKEN))
            .with_header("X-Api-Key", Secret::new("key-abcdef"))
            .expect("header");
        let server = ToolServer::new(
            "docs",
            Url::parse("https://u:pw-123@tools.example/mcp?key=q-456").expect("url"),
        )
        .expect("server")
        .with_credentials(creds);
        let shown = format!("{server:?}");
        for secret in [TOKEN, "key-abcdef"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert_eq!(server.id().url, "https://tools.example/mcp");
        let echoed = format!("got {TOKEN} and key-abcdef and key=q-456 and pw-123");
        let cut = server.redact(&echoed);
        for secret in [TOKEN, "key-abcdef", "q-456", "pw-123"] {
            assert!(!cut.contains(secret), "{cut}");
        }
    }

    #[test]
    fn transport_headers_and_bad_values_are_refused_without_echoing_them() {
        for name in ["Authorization", "content-type", "Mcp-Session-Id"] {
            let err = Credentials::default()
                .with_header(name, Secret::new("v"))
                .expect_err(name);
            assert!(err.contains("transport"), "{err}");
        }
        let err = Credentials::default()
            .with_header("x-key", Secret::new("bad\u{7}bell"))
            .expect_err("control character");
        assert!(!err.contains("bell"), "{err}");
    }

    #[test]
    fn only_http_urls_with_a_host() {
        for url in ["ftp://h/x", "file:///tmp/x"] {
            assert!(
                ToolServer::new("s", Url::parse(url).expect("url")).is_err(),
                "{url}"
            );
        }
    }
}
