//! State shared by the controllers.

use std::sync::Arc;

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
}

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
        }
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
