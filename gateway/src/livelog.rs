//! Live logs only while a stream follows: a stream keeps the followed Task's
//! [`ANNOTATION_LIVE_LOG`] lease current (renewed every third of [`LIVE_LOG_LEASE`]) and stops
//! when it ends, so the executor stops writing `status.liveLog` one lease after the last
//! follower left. Only the gateway's ServiceAccount may set the annotation (the chart's
//! admission policy), so no Task author can turn these writes on.

use std::time::Duration;

use ari_crds::Task;
use ari_crds::names::{ANNOTATION_LIVE_LOG, LIVE_LOG_LEASE};
use futures::{Stream, StreamExt};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::{Patch, PatchParams};
use tracing::debug;

/// The lease value for a follower seen at `now`: the time until which it counts as following.
pub fn lease_until(now: Timestamp) -> String {
    let lease = SignedDuration::try_from(LIVE_LOG_LEASE).unwrap_or(SignedDuration::ZERO);
    now.checked_add(lease).unwrap_or(now).to_string()
}

/// Renews the lease of one Task while alive; dropping it (the stream ended) stops renewing.
struct Keeper(tokio::task::JoinHandle<()>);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `stream`, keeping `name`'s live-log lease current for as long as it is polled or held.
/// `fresh`: the Task was just created with a lease, so the first renewal waits.
pub fn while_followed<S: Stream + Send + 'static>(
    api: Api<Task>,
    name: &str,
    fresh: bool,
    stream: S,
) -> impl Stream<Item = S::Item> + Send + 'static + use<S> {
    let name = name.to_owned();
    let every = LIVE_LOG_LEASE / 3;
    let keeper = Keeper(tokio::spawn(async move {
        let mut wait = if fresh { every } else { Duration::ZERO };
        loop {
            tokio::time::sleep(wait).await;
            wait = every;
            let patch = serde_json::json!({
                "metadata": {"annotations": {ANNOTATION_LIVE_LOG: lease_until(Timestamp::now())}}
            });
            if let Err(e) = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                debug!(task = %name, error = %e, "live-log lease not renewed");
            }
        }
    }));
    stream.map(move |item| {
        let _held = &keeper;
        item
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_runs_one_lease_ahead() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        assert_eq!(lease_until(now), "2026-01-01T00:00:30Z");
    }
}
