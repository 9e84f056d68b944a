//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it.
//!
//! The holder renews `spec.renewTime` every `renew_every`; anyone may take the Lease once
//! `renewTime + leaseDurationSeconds` is in the past. Every write is an update guarded by the
//! Lease's `resourceVersion`, so two candidates never both win.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tracing::{info, warn};

/// Settings of one election.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_every: Duration,
}

/// Takes part in the election on one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    cfg: LeaseConfig,
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl LeaderElector {
    pub fn new(api: Api<Lease>, cfg: LeaseConfig) -> Self {
        Self { api, cfg }
    }

    /// One round: acquire the Lease if free or expired, renew it if ours. `Ok(true)` = leading.
    pub async fn try_acquire_or_renew(&self, now: Timestamp) -> Result<bool, kube::Error> {
        let secs = i32::try_from(self.cfg.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.cfg.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let ours = spec.holder_identity.as_deref() == Some(self.cfg.identity.as_str());
        if !ours && !expired(spec, now) {
            return Ok(false);
        }
        if !ours {
            spec.holder_identity = Some(self.cfg.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.lease_duration_seconds = Some(secs);
        spec.renew_time = Some(MicroTime(now));
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up (on shutdown) so a standby takes over at once instead of waiting.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Runs the election until `stop` turns true, publishing whether we lead; then releases
    /// the Lease (if ours) so a standby takes over at its next round instead of waiting for
    /// the Lease to expire. Set `stop` only once the controllers have stopped.
    ///
    /// A leader whose renewals fail steps down once its last success is older than
    /// [`LeaseConfig::renew_deadline`], well before the Lease expires for the others.
    pub async fn run(self, leading: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let mut last_renew: Option<tokio::time::Instant> = None;
        loop {
            if *stop.borrow() {
                break;
            }
            let now = Timestamp::now();
            let ok = match self.try_acquire_or_renew(now).await {
                Ok(ok) => ok,
                Err(e) => {
                    warn!(error = %e, "lease round failed");
                    last_renew.is_some_and(|t| t.elapsed() < self.cfg.renew_deadline())
                }
            };
            if ok {
                last_renew = Some(tokio::time::Instant::now());
            }
            if *leading.borrow() != ok {
                info!(leading = ok, identity = %self.cfg.identity, "leadership changed");
                let _ = leading.send(ok);
            }
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.renew_every) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        let _ = leading.send(false);
        match self.release().await {
            Ok(()) => info!(identity = %self.cfg.identity, "lease released"),
            Err(e) => warn!(error = %e, "releasing the lease failed"),
        }
    }
}

impl LeaseConfig {
    /// How long a leader keeps leading without a successful renewal: two thirds of the
    /// Lease, so it stops acting well before another candidate may take the Lease.
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration.mul_f64(2.0 / 3.0)
    }
}

/// Whether the holder's lease ran out (or there is no holder).
fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
        return true;
    }
    let Some(renew) = &spec.renew_time else {
        return true;
    };
    let dur = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    renew.0.checked_add(dur).map_or(true, |end| end < now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renew_secs: i64, dur: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: Timestamp::from_second(renew_secs).ok().map(MicroTime),
            lease_duration_seconds: Some(dur),
            ..Default::default()
        }
    }

    #[test]
    fn lease_expires_after_its_duration_or_without_holder() {
        let now = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        assert!(!expired(&spec(Some("a"), 990, 15), now));
        assert!(expired(&spec(Some("a"), 980, 15), now));
        assert!(expired(&spec(None, 999, 15), now));
        assert!(expired(&spec(Some(""), 999, 15), now));
    }

    #[test]
    fn a_leader_gives_up_well_before_its_lease_expires() {
        let cfg = LeaseConfig {
            name: "l".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
        };
        assert_eq!(cfg.renew_deadline(), Duration::from_secs(10));
        assert!(
            cfg.renew_deadline() >= cfg.renew_every * 2,
            "one failed round is tolerated"
        );
    }

    #[tokio::test]
    async fn stopping_the_election_releases_a_lease_we_hold() {
        use crate::testutil::{find, mock_client};
        use serde_json::json;
        let lease = |holder: Option<&str>| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "ari", "namespace": "ari-system", "resourceVersion": "3"},
                   "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                            "renewTime": "2020-01-01T00:00:00.000000Z"}})
        };
        let (client, log) = mock_client(move |m, _, b| match m {
            "GET" => (200, lease(Some("me"))),
            _ => (200, b.clone()),
        });
        let elector = LeaderElector::new(
            Api::namespaced(client, "ari-system"),
            LeaseConfig {
                name: "ari".into(),
                identity: "me".into(),
                lease_duration: Duration::from_secs(15),
                renew_every: Duration::from_secs(3600),
            },
        );
        let (lead_tx, mut lead_rx) = watch::channel(false);
        let (stop_tx, stop_rx) = watch::channel(false);
        let run = tokio::spawn(elector.run(lead_tx, stop_rx));
        let _ = lead_rx.wait_for(|l| *l).await;
        let _ = stop_tx.send(true);
        let _ = run.await;
        let puts = find(&log, "PUT", "leases/ari");
        let last = puts
            .last()
            .map(|r| r.body["spec"].clone())
            .unwrap_or_default();
        assert!(puts.len() >= 2, "renew then release: {puts:?}");
        assert!(last["holderIdentity"].is_null(), "released: {last}");
        assert!(!*lead_rx.borrow(), "no longer leading after the release");
    }
}
