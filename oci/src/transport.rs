//! The few registry requests a pull makes, done here with reqwest rather than through
//! `oci-client`: that crate builds its own HTTP client (redirects followed anywhere, any token
//! realm fetched, no resolver hook) and reads manifests and token replies whole. Here every hop
//! is checked by [`NetworkPolicy`], names are resolved through a resolver that refuses internal
//! addresses, bodies are read with a cap while they stream, and no response body ever reaches an
//! error message.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{ACCEPT, LOCATION, WWW_AUTHENTICATE};
use reqwest::{RequestBuilder, Response, StatusCode, Url};

use crate::policy::{Endpoint, NetworkPolicy, Refusal};
use crate::{Credentials, Error, Reference};

/// A registry that does not answer within this is down, not slow.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A stalled transfer fails instead of holding a reconcile forever.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Most redirects followed for one request (each checked).
const MAX_REDIRECTS: usize = 5;
/// The largest token reply read; real ones are a few KiB.
pub const MAX_TOKEN_BYTES: usize = 1 << 20;

/// The HTTP client every pull of a [`crate::Client`] shares.
#[derive(Clone)]
pub(crate) struct Transport {
    http: reqwest::Client,
    policy: Arc<NetworkPolicy>,
}

impl Transport {
    pub(crate) fn new(policy: Arc<NetworkPolicy>) -> Result<Transport, Error> {
        let http = reqwest::Client::builder()
            // Redirects are followed by `Session::get`, each hop checked.
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would resolve names itself, past the resolver's check.
            .no_proxy()
            .dns_resolver(Arc::new(Resolver {
                policy: policy.clone(),
            }))
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent(concat!("ari/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Other(format!("building the registry client: {e}")))?;
        Ok(Transport { http, policy })
    }

    /// Requests for `reference`'s repository with `credentials`.
    pub(crate) fn session<'a>(
        &'a self,
        reference: &Reference,
        credentials: &'a Credentials,
    ) -> Result<Session<'a>, Error> {
        let what = reference.to_string();
        let base = self
            .policy
            .base_url(reference.resolve_registry())
            .map_err(|r| refused(&what, r))?;
        Ok(Session {
            transport: self,
            base,
            repository: reference.repository().to_string(),
            what,
            credentials,
            token: None,
        })
    }
}

/// Requests to one repository; remembers the bearer token it was given.
pub(crate) struct Session<'a> {
    transport: &'a Transport,
    base: Url,
    repository: String,
    /// The reference, for messages.
    what: String,
    credentials: &'a Credentials,
    token: Option<String>,
}

impl Session<'_> {
    pub(crate) fn what(&self) -> &str {
        &self.what
    }

    /// `GET /v2/<repository>/<path>`: redirects followed hop by hop under the policy,
    /// credentials sent to the registry's own endpoint only, one authentication on a 401.
    /// Anything but a 2xx is an error with the status code and a fixed text.
    pub(crate) async fn get(&mut self, path: &str, accept: &str) -> Result<Response, Error> {
        let mut url = self
            .base
            .join(&format!("v2/{}/{path}", self.repository))
            .map_err(|_| refused(&self.what, Refusal::BadUrl))?;
        let mut authenticated = false;
        let mut hops = 0;
        loop {
            self.check(&url)?;
            let own = Endpoint::of(&url) == Endpoint::of(&self.base);
            let mut request = self.transport.http.get(url.clone()).header(ACCEPT, accept);
            if own {
                request = self.authorize(request);
            }
            let response = request.send().await.map_err(|e| self.transport_error(&e))?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && own && !authenticated {
                let challenge = header(&response, WWW_AUTHENTICATE);
                self.authenticate(challenge.as_deref()).await?;
                authenticated = true;
                continue;
            }
            if status.is_redirection() {
                hops += 1;
                let next = header(&response, LOCATION).and_then(|l| url.join(&l).ok());
                match next {
                    Some(next) if hops <= MAX_REDIRECTS => url = next,
                    _ => return Err(Error::from_http_status(&self.what, status.as_u16())),
                }
                continue;
            }
            if !status.is_success() {
                return Err(Error::from_http_status(&self.what, status.as_u16()));
            }
            return Ok(response);
        }
    }

    fn check(&self, url: &Url) -> Result<(), Error> {
        self.transport
            .policy
            .check_hop(&self.base, url)
            .map_err(|r| refused(&self.what, r))
    }

    fn authorize(&self, request: RequestBuilder) -> RequestBuilder {
        match (&self.token, self.credentials) {
            (Some(token), _) | (None, Credentials::Bearer(token)) => request.bearer_auth(token),
            (None, Credentials::Basic { username, password }) => {
                request.basic_auth(username, Some(password))
            }
            (None, Credentials::Anonymous) => request,
        }
    }

    /// Answers a 401: a bearer token from the realm the registry names (checked like any hop),
    /// with the credentials; anything else is `Unauthorized`.
    async fn authenticate(&mut self, challenge: Option<&str>) -> Result<(), Error> {
        let unauthorized = || {
            Error::Unauthorized(format!(
                "{}: the registry refused the credentials (or wants some)",
                self.what
            ))
        };
        let Some(bearer) = challenge.and_then(bearer_challenge) else {
            return Err(unauthorized());
        };
        if matches!(self.credentials, Credentials::Bearer(_)) {
            return Err(unauthorized());
        }
        let mut realm =
            Url::parse(&bearer.realm).map_err(|_| refused(&self.what, Refusal::BadUrl))?;
        self.check(&realm)?;
        {
            let mut query = realm.query_pairs_mut();
            if let Some(service) = &bearer.service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", &format!("repository:{}:pull", self.repository));
        }
        let mut request = self.transport.http.get(realm);
        if let Credentials::Basic { username, password } = self.credentials {
            request = request.basic_auth(username, Some(password));
        }
        let response = request.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(Error::from_http_status(
                &format!("{} (token service)", self.what),
                status.as_u16(),
            ));
        }
        let body = read_capped(response, MAX_TOKEN_BYTES, &self.what, "token reply").await?;
        let reply: TokenReply = serde_json::from_slice(&body).map_err(|_| {
            Error::Other(format!(
                "{}: the token service's reply is not a token",
                self.what
            ))
        })?;
        self.token = Some(
            reply
                .token
                .or(reply.access_token)
                .ok_or_else(unauthorized)?,
        );
        Ok(())
    }

    /// A failed request, in one of two fixed texts: refused by the resolver, or unreachable.
    pub(crate) fn transport_error(&self, err: &reqwest::Error) -> Error {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(e) = source {
            if e.is::<InternalAddress>() {
                return refused(&self.what, Refusal::InternalAddress);
            }
            source = e.source();
        }
        Error::unreachable(&self.what)
    }
}

#[derive(serde::Deserialize)]
struct TokenReply {
    token: Option<String>,
    access_token: Option<String>,
}

struct BearerChallenge {
    realm: String,
    service: Option<String>,
}

/// The `Bearer realm=...,service=...` challenge of a `WWW-Authenticate` header, if any.
fn bearer_challenge(header: &str) -> Option<BearerChallenge> {
    http_auth::parser::ChallengeParser::new(header)
        .filter_map(Result::ok)
        .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))
        .and_then(|c| {
            let param = |name: &str| {
                c.params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.to_unescaped())
            };
            Some(BearerChallenge {
                realm: param("realm")?,
                service: param("service"),
            })
        })
}

fn header(response: &Response, name: reqwest::header::HeaderName) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn refused(what: &str, refusal: Refusal) -> Error {
    Error::NotAllowed(format!("{what}: {}", refusal.text()))
}

/// Reads at most `cap` bytes of the body, stopping as soon as more arrive (or a length over the
/// cap is announced): a registry streaming forever costs `cap` bytes, not the operator.
pub(crate) async fn read_capped(
    mut response: Response,
    cap: usize,
    what: &str,
    kind: &str,
) -> Result<Vec<u8>, Error> {
    let too_large = || Error::Other(format!("{what}: the registry's {kind} is over {cap} bytes"));
    if response.content_length().is_some_and(|l| l > cap as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|_| Error::unreachable(what))?
    {
        if body.len() + chunk.len() > cap {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The resolver's refusal; found again in the error chain by `Session::transport_error`.
#[derive(Debug)]
struct InternalAddress;

impl std::fmt::Display for InternalAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(Refusal::InternalAddress.text())
    }
}

impl std::error::Error for InternalAddress {}

/// A resolver for another HTTP client of the operator that must keep to `policy`'s addresses
/// (the model endpoint probe): the same check as every registry request.
pub fn policy_resolver(policy: Arc<NetworkPolicy>) -> Arc<dyn reqwest::dns::Resolve> {
    Arc::new(Resolver { policy })
}

/// Resolves names with the system resolver and keeps only the addresses the policy allows for
/// that name: the check is on the addresses connected to, so DNS cannot point a public name at
/// a cluster service.
struct Resolver {
    policy: Arc<NetworkPolicy>,
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_ascii_lowercase();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| policy.address_allowed(&host, a.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(Box::new(InternalAddress) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_challenge_is_found_among_others() {
        let c = bearer_challenge(
            r#"Basic realm="x", Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:a:pull""#,
        )
        .expect("a bearer challenge");
        assert_eq!(c.realm, "https://ghcr.io/token");
        assert_eq!(c.service.as_deref(), Some("ghcr.io"));
        assert!(bearer_challenge(r#"Basic realm="registry""#).is_none());
        assert!(bearer_challenge("Bearer service=\"x\"").is_none());
    }
}
