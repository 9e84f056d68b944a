//! Watches that decode each object on its own, for every process that watches these resources
//! (the operator, the gateway).
//!
//! A typed list fails as a whole when one item does not fit the Rust type (say an integer
//! the schema once allowed but `u32` cannot hold), and a typed watcher then retries that list
//! forever: one object written by a namespace user would blind the operator cluster-wide.
//! Here the list and watch are read as [`DynamicObject`]s and each is decoded separately; one
//! that does not decode is logged, counted and skipped.

use std::fmt::Debug;

use futures::{Stream, StreamExt, future};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_fn};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::warn;

/// `watcher(Api<K>)`, except that objects which do not decode as `K` are skipped; `skipped`
/// is called with the kind of each (the caller counts them: this crate has no metrics).
pub fn watch<K>(
    client: Client,
    namespace: Option<String>,
    cfg: watcher::Config,
    skipped: impl Fn(&str) + Send + 'static,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug + Send + 'static,
{
    let ar = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client, &ns, &ar),
        None => Api::all_with(client, &ar),
    };
    let kind = ar.kind;
    watch_fn(api, cfg).default_backoff().filter_map(move |ev| {
        future::ready(match ev {
            Ok(ev) => decode_event::<K>(ev, &kind, &skipped).map(Ok),
            Err(e) => Some(Err(e)),
        })
    })
}

/// The typed event, or `None` when its object does not decode (logged and counted).
fn decode_event<K>(
    ev: Event<DynamicObject>,
    kind: &str,
    skipped: &impl Fn(&str),
) -> Option<Event<K>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let decode = |obj: DynamicObject| {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        match obj.try_parse::<K>() {
            Ok(k) => Some(k),
            Err(e) => {
                skipped(kind);
                warn!(kind, namespace = %ns, name = %name, error = %e,
                    "skipping an object that does not decode");
                None
            }
        }
    };
    match ev {
        Event::Apply(o) => decode(o).map(Event::Apply),
        Event::Delete(o) => decode(o).map(Event::Delete),
        Event::InitApply(o) => decode(o).map(Event::InitApply),
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Task;
    use ari_testkit::mock_api::mock_client;
    use serde_json::json;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn task(name: &str, ns: &str, ttl: u64) -> serde_json::Value {
        json!({"apiVersion": "ari.dev/v1alpha1", "kind": "Task",
               "metadata": {"name": name, "namespace": ns, "resourceVersion": "5"},
               "spec": {"agentRef": {"name": "a"}, "input": "x", "ttlSecondsAfterFinished": ttl}})
    }

    fn poisoned_list(_: &str, _: &str, _: &serde_json::Value) -> (u16, serde_json::Value) {
        (
            200,
            json!({"apiVersion": "ari.dev/v1alpha1", "kind": "TaskList",
                   "metadata": {"resourceVersion": "7"},
                   "items": [task("poison", "evil", 4_294_967_296), task("fine", "good", 60)]}),
        )
    }

    /// Events up to the end of the first list.
    async fn first_list<S, K>(stream: S) -> Vec<Result<Event<K>, watcher::Error>>
    where
        S: Stream<Item = Result<Event<K>, watcher::Error>>,
    {
        let mut out = Vec::new();
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let done = matches!(ev, Ok(Event::InitDone) | Err(_));
            out.push(ev);
            if done {
                break;
            }
        }
        out
    }

    #[tokio::test]
    async fn one_task_that_does_not_decode_is_skipped_and_the_rest_are_listed() {
        // The poison is real: a typed watcher cannot list these Tasks at all.
        let (client, _) = mock_client(poisoned_list);
        let typed = first_list(watch_fn(
            Api::<Task>::all(client),
            watcher::Config::default(),
        ))
        .await;
        assert!(
            !typed.iter().any(|e| matches!(e, Ok(Event::InitApply(_)))),
            "{typed:?}"
        );
        assert!(matches!(typed.last(), Some(Err(_))), "{typed:?}");

        let tasks_skipped = Arc::new(AtomicU64::new(0));
        let count = tasks_skipped.clone();
        let (client, _) = mock_client(poisoned_list);
        let events = first_list(watch::<Task>(
            client,
            None,
            watcher::Config::default(),
            move |kind| {
                if kind == "Task" {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            },
        ))
        .await;
        let listed: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                Ok(Event::InitApply(t)) => Some(t.name_any()),
                _ => None,
            })
            .collect();
        assert_eq!(listed, ["fine"]);
        assert!(
            matches!(events.last(), Some(Ok(Event::InitDone))),
            "{events:?}"
        );
        assert_eq!(tasks_skipped.load(Ordering::Relaxed), 1);
    }
}
