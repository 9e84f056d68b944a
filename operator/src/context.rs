//! State shared by the controllers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::warn;

use crate::agent::image::{ImageResolver, Registry};
use crate::config::Settings;
use crate::metrics::Metrics;

/// Everything a reconcile needs.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Resolves `module.image` (one registry client for every Agent).
    pub images: ImageResolver,
    /// ConfigMap modules already read and checked, by version.
    pub modules: crate::agent::module::Checked,
    /// When each namespace's executor identities were last applied (see [`Self::due`]).
    applied: Mutex<HashMap<(String, &'static str), Instant>>,
}

/// How long an applied namespace-wide object (an executor ServiceAccount, Role, RoleBinding)
/// is taken as still in place before it is applied again.
pub const REAPPLY_AFTER: Duration = Duration::from_secs(300);

impl Context {
    pub fn new(
        client: Client,
        settings: Settings,
        metrics: Arc<Metrics>,
        instance: Option<String>,
        registry: Arc<dyn Registry>,
    ) -> Self {
        let reporter = Reporter {
            controller: "ari-operator".into(),
            instance,
        };
        let recorder = Recorder::new(client.clone(), reporter);
        let images = ImageResolver::new(registry, settings.registry_timeout);
        Self {
            client,
            settings,
            metrics,
            recorder,
            images,
            modules: Default::default(),
            applied: Mutex::default(),
        }
    }

    /// Whether `what` of `namespace` is due to be applied: never applied by this process, or
    /// not within [`REAPPLY_AFTER`]. Every Agent of a namespace shares its executor identity,
    /// so applying it on each Agent's reconcile cost three writes per Agent (3,000 Agents:
    /// 9,000 writes per pass) for objects that do not change; a deleted one comes back within
    /// five minutes. Call [`Self::applied`] once the apply succeeded.
    pub fn due(&self, namespace: &str, what: &'static str) -> bool {
        let applied = self
            .applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        applied
            .get(&(namespace.to_owned(), what))
            .is_none_or(|t| t.elapsed() >= REAPPLY_AFTER)
    }

    /// Records that `what` of `namespace` was applied now.
    pub fn applied(&self, namespace: &str, what: &'static str) {
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((namespace.to_owned(), what), Instant::now());
    }

    /// Publishes an Event on `obj`; a failed Event is logged, never fails the reconcile.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            warn!(error = %e, reason, "publishing event failed");
        }
    }
}
