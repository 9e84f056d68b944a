//! Who is calling (a Kubernetes bearer token, checked by TokenReview) and whether they may
//! (a SubjectAccessReview on Tasks in the namespace: the same answer `kubectl auth can-i`
//! gives). Answers are cached for a few seconds, keyed by the token's digest, so a busy caller
//! costs the API server two reviews per [`CACHE_TTL`], not two per message; tokens the cache
//! does not know share one bounded budget of TokenReviews.

use std::collections::HashMap;
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
use crate::limits::ReviewBudget;

/// How long a review's answer is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// Cached answers kept at most; past it the cache starts over.
const CACHE_MAX: usize = 10_000;
/// Longest token looked at (a service-account JWT is ~1 KiB).
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// TokenReviews per second (and burst) for tokens not in the cache, over all callers.
pub const REVIEWS_PER_SECOND: u32 = 50;
pub const REVIEWS_BURST: u32 = 200;

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
    GetAgent,
}

impl Access {
    fn attributes(self, namespace: &str, agent: &str) -> ResourceAttributes {
        let (verb, resource, name) = match self {
            Self::CreateTasks => ("create", "tasks", None),
            Self::GetTasks => ("get", "tasks", None),
            Self::ListTasks => ("list", "tasks", None),
            Self::CancelTasks => ("patch", "tasks", None),
            Self::GetAgent => ("get", "agents", Some(agent.to_owned())),
        };
        ResourceAttributes {
            group: Some("ari.dev".into()),
            namespace: Some(namespace.to_owned()),
            resource: Some(resource.into()),
            verb: Some(verb.into()),
            name,
            ..ResourceAttributes::default()
        }
    }
}

type Cached<T> = Mutex<HashMap<String, (Instant, T)>>;

pub struct Auth {
    client: Client,
    callers: Cached<Option<Caller>>,
    grants: Cached<bool>,
    reviews: ReviewBudget,
}

impl Auth {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            callers: Mutex::new(HashMap::new()),
            grants: Mutex::new(HashMap::new()),
            reviews: ReviewBudget::new(REVIEWS_PER_SECOND, REVIEWS_BURST),
        }
    }

    /// The caller behind the request's bearer token; `Unauthenticated` without one,
    /// `BadToken` when the API server does not accept it.
    pub async fn caller(&self, headers: &HeaderMap) -> Result<(Caller, String)> {
        let token = bearer(headers).ok_or(Error::Unauthenticated)?;
        let key = hex::encode(Sha256::digest(token.as_bytes()));
        if let Some(hit) = lookup(&self.callers, &key) {
            return hit.map(|c| (c, key)).ok_or(Error::BadToken);
        }
        self.reviews.take()?;
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..TokenReviewSpec::default()
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
        remember(&self.callers, key.clone(), caller.clone());
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
        let allowed = match lookup(&self.grants, &key) {
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
                remember(&self.grants, key, allowed);
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

fn lookup<T: Clone>(cache: &Cached<T>, key: &str) -> Option<T> {
    let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .get(key)
        .filter(|(at, _)| at.elapsed() < CACHE_TTL)
        .map(|(_, v)| v.clone())
}

fn remember<T>(cache: &Cached<T>, key: String, value: T) {
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= CACHE_MAX {
        cache.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
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
    }

    #[test]
    fn cached_answers_expire_and_the_cache_stays_bounded() {
        let cache: Cached<bool> = Mutex::new(HashMap::new());
        for i in 0..(CACHE_MAX + 10) {
            remember(&cache, i.to_string(), true);
        }
        assert!(cache.lock().expect("unpoisoned").len() <= CACHE_MAX);
        assert_eq!(lookup(&cache, &(CACHE_MAX + 9).to_string()), Some(true));
        assert_eq!(lookup(&cache, "missing"), None);
    }
}
