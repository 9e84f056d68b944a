//! Who is calling (a Kubernetes bearer token, checked by TokenReview) and whether they may
//! (a SubjectAccessReview on Tasks in the namespace: the same answer `kubectl auth can-i`
//! gives). Answers are cached for a few seconds, keyed by the token's digest, so a busy caller
//! costs the API server two reviews per [`CACHE_TTL`], not two per message.
//!
//! Tokens are reviewed for the gateway's audiences only, so a token made for the gateway is
//! no good at the API server and a token for the API server (a pod's own) is no good here.
//! Reviews of tokens the cache does not know draw from budgets a flood of made-up tokens
//! cannot take from callers already known good: a token accepted once in the last
//! [`KNOWN_TTL`] draws from its own budget; any other from one per source address and one
//! shared by all.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::limits::{ReviewBudget, SourceBudget};

/// How long a review's answer is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// Cached answers kept at most; past it the cache starts over.
const CACHE_MAX: usize = 10_000;
/// Longest token looked at (a service-account JWT is ~1 KiB).
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// How long a token accepted once counts as known good (its re-reviews skip the budgets of
/// unknown tokens).
pub const KNOWN_TTL: Duration = Duration::from_secs(3600);
/// TokenReviews per second (and burst) for tokens never accepted, over all callers.
pub const REVIEWS_PER_SECOND: u32 = 50;
pub const REVIEWS_BURST: u32 = 200;
/// TokenReviews per second (and burst) for tokens never accepted, per source address.
pub const REVIEWS_PER_SOURCE_PER_SECOND: u32 = 5;
pub const REVIEWS_PER_SOURCE_BURST: u32 = 20;
/// The subresource whose `get` lets a caller see and act on every caller's A2A tasks of a
/// namespace, not only their own (docs/a2a.md).
pub const ALL_CALLERS_SUBRESOURCE: &str = "a2a-all";

/// An authenticated caller, as the API server knows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// What a caller wants to do to Tasks (or an Agent, for its card).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    CreateTasks,
    GetTasks,
    ListTasks,
    CancelTasks,
    /// Deciding a call a task waits on: the right `kubectl ari approve` needs.
    DecideTasks,
    GetAgent,
    /// Every caller's tasks, not only one's own: `get` on `tasks/a2a-all`.
    AllCallers,
}

impl Access {
    fn attributes(self, namespace: &str, agent: &str) -> ResourceAttributes {
        let (verb, resource, name) = match self {
            Self::CreateTasks => ("create", "tasks", None),
            Self::GetTasks => ("get", "tasks", None),
            Self::ListTasks => ("list", "tasks", None),
            Self::CancelTasks => ("patch", "tasks", None),
            Self::DecideTasks => ("update", "tasks", None),
            Self::GetAgent => ("get", "agents", Some(agent.to_owned())),
            Self::AllCallers => ("get", "tasks", None),
        };
        ResourceAttributes {
            group: Some("ari.dev".into()),
            namespace: Some(namespace.to_owned()),
            resource: Some(resource.into()),
            subresource: (self == Self::AllCallers).then(|| ALL_CALLERS_SUBRESOURCE.to_owned()),
            verb: Some(verb.into()),
            name,
            ..ResourceAttributes::default()
        }
    }
}

type Cached<T> = Mutex<HashMap<String, (Instant, T)>>;

pub struct Auth {
    client: Client,
    audiences: Vec<String>,
    callers: Cached<Option<Caller>>,
    /// Digests of tokens accepted in the last [`KNOWN_TTL`].
    known: Cached<()>,
    grants: Cached<bool>,
    reviews: Reviews,
}

impl Auth {
    /// Reviews tokens for `audiences` (none: the API server's own, which the gateway does not
    /// do by default).
    pub fn new(client: Client, audiences: Vec<String>) -> Self {
        Self {
            client,
            audiences,
            callers: Mutex::new(HashMap::new()),
            known: Mutex::new(HashMap::new()),
            grants: Mutex::new(HashMap::new()),
            reviews: Reviews::default(),
        }
    }

    /// The caller behind the request's bearer token; `Unauthenticated` without one,
    /// `BadToken` when the API server does not accept it, `RateLimited` when the budget its
    /// review would draw from (see [`Reviews`]) is spent.
    pub async fn caller(&self, headers: &HeaderMap, source: IpAddr) -> Result<(Caller, String)> {
        let token = bearer(headers).ok_or(Error::Unauthenticated)?;
        let key = hex::encode(Sha256::digest(token.as_bytes()));
        if let Some(hit) = lookup(&self.callers, &key, CACHE_TTL) {
            return hit.map(|c| (c, key)).ok_or(Error::BadToken);
        }
        let known = lookup(&self.known, &key, KNOWN_TTL).is_some();
        self.reviews.take(known, source)?;
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let caller = answer
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
            .map(|u| Caller {
                username: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            });
        remember(&self.callers, key.clone(), caller.clone(), CACHE_TTL);
        if caller.is_some() {
            remember(&self.known, key.clone(), (), KNOWN_TTL);
        }
        caller.map(|c| (c, key)).ok_or(Error::BadToken)
    }

    /// `Ok` when `caller` may do `access` in `namespace`; `Forbidden` otherwise.
    pub async fn allow(
        &self,
        caller: &Caller,
        token_key: &str,
        access: Access,
        namespace: &str,
        agent: &str,
    ) -> Result<()> {
        let key = format!("{token_key}/{access:?}/{namespace}/{agent}");
        let allowed = match lookup(&self.grants, &key, CACHE_TTL) {
            Some(hit) => hit,
            None => {
                let review = SubjectAccessReview {
                    spec: SubjectAccessReviewSpec {
                        user: Some(caller.username.clone()),
                        uid: Some(caller.uid.clone()),
                        groups: Some(caller.groups.clone()),
                        extra: Some(caller.extra.clone()),
                        resource_attributes: Some(access.attributes(namespace, agent)),
                        ..SubjectAccessReviewSpec::default()
                    },
                    ..SubjectAccessReview::default()
                };
                let answer = Api::<SubjectAccessReview>::all(self.client.clone())
                    .create(&PostParams::default(), &review)
                    .await?;
                let allowed = answer.status.is_some_and(|s| s.allowed);
                remember(&self.grants, key, allowed, CACHE_TTL);
                allowed
            }
        };
        if allowed {
            Ok(())
        } else {
            let attrs = access.attributes(namespace, agent);
            Err(Error::Forbidden(format!(
                "{} may not {} {} in namespace {namespace}",
                caller.username,
                attrs.verb.unwrap_or_default(),
                attrs.resource.unwrap_or_default(),
            )))
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && token.len() <= MAX_TOKEN_BYTES)
        .then_some(token)
}

/// Which budgets a TokenReview draws from: a token accepted before from the known-good
/// budget only; any other from its source address's budget, then the shared one. So a flood of
/// made-up tokens spends its own address's budget (and at most the shared one), never the
/// re-reviews of callers already known.
pub struct Reviews {
    known: ReviewBudget,
    unknown: ReviewBudget,
    per_source: SourceBudget,
}

impl Default for Reviews {
    fn default() -> Self {
        Self {
            known: ReviewBudget::new(REVIEWS_PER_SECOND, REVIEWS_BURST),
            unknown: ReviewBudget::new(REVIEWS_PER_SECOND, REVIEWS_BURST),
            per_source: SourceBudget::new(REVIEWS_PER_SOURCE_PER_SECOND, REVIEWS_PER_SOURCE_BURST),
        }
    }
}

impl Reviews {
    /// One review of a token that is `known` good or comes from `source`, or `RateLimited`.
    pub fn take(&self, known: bool, source: IpAddr) -> Result<()> {
        if known {
            return self.known.take();
        }
        self.per_source.take(source)?;
        self.unknown.take()
    }
}

fn lookup<T: Clone>(cache: &Cached<T>, key: &str, ttl: Duration) -> Option<T> {
    let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .get(key)
        .filter(|(at, _)| at.elapsed() < ttl)
        .map(|(_, v)| v.clone())
}

fn remember<T>(cache: &Cached<T>, key: String, value: T, ttl: Duration) {
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= CACHE_MAX {
        cache.retain(|_, (at, _)| at.elapsed() < ttl);
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
    }
    cache.insert(key, (Instant::now(), value));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::AUTHORIZATION,
            value.parse().expect("a header value"),
        );
        h
    }

    #[test]
    fn only_a_bearer_token_is_taken() {
        assert_eq!(bearer(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&headers("bearer abc")), Some("abc"));
        assert_eq!(bearer(&headers("Basic abc")), None);
        assert_eq!(bearer(&headers("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn each_access_asks_for_the_matching_verb() {
        let a = Access::CancelTasks.attributes("ns", "agent");
        assert_eq!(a.verb.as_deref(), Some("patch"));
        assert_eq!(a.resource.as_deref(), Some("tasks"));
        let card = Access::GetAgent.attributes("ns", "agent");
        assert_eq!(card.name.as_deref(), Some("agent"));
        let all = Access::AllCallers.attributes("ns", "agent");
        assert_eq!(
            (
                all.verb.as_deref(),
                all.resource.as_deref(),
                all.subresource.as_deref()
            ),
            (Some("get"), Some("tasks"), Some("a2a-all"))
        );
        assert_eq!(Access::GetTasks.attributes("ns", "a").subresource, None);
    }

    #[test]
    fn a_flood_of_unknown_tokens_does_not_spend_the_known_good_budget() {
        let reviews = Reviews::default();
        let flood: IpAddr = "10.0.0.1".parse().expect("an address");
        let other: IpAddr = "10.0.0.2".parse().expect("an address");
        let mut refused = 0;
        for _ in 0..1_000 {
            refused += usize::from(reviews.take(false, flood).is_err());
        }
        assert!(refused >= 1_000 - REVIEWS_PER_SOURCE_BURST as usize);
        reviews
            .take(false, other)
            .expect("another source still has its budget");
        reviews
            .take(true, flood)
            .expect("a known-good token is reviewed from any source");
        // Many sources together spend the shared budget, still not the known one.
        for i in 0..=255u8 {
            for _ in 0..REVIEWS_PER_SOURCE_BURST {
                let _ = reviews.take(false, IpAddr::from([10, 1, 0, i]));
            }
        }
        assert!(matches!(
            reviews.take(false, "10.2.0.1".parse().expect("an address")),
            Err(Error::RateLimited)
        ));
        reviews
            .take(true, flood)
            .expect("the known-good budget is untouched");
    }

    #[test]
    fn cached_answers_expire_and_the_cache_stays_bounded() {
        let cache: Cached<bool> = Mutex::new(HashMap::new());
        for i in 0..(CACHE_MAX + 10) {
            remember(&cache, i.to_string(), true, CACHE_TTL);
        }
        assert!(cache.lock().expect("unpoisoned").len() <= CACHE_MAX);
        assert_eq!(
            lookup(&cache, &(CACHE_MAX + 9).to_string(), CACHE_TTL),
            Some(true)
        );
        assert_eq!(lookup(&cache, "missing", CACHE_TTL), None);
        assert_eq!(lookup(&cache, "0", Duration::ZERO), None, "expired");
    }
}
