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

    /// Runs the election forever, publishing whether we lead. Errors count as not leading
    /// once the lease would have expired, so a partitioned leader steps down in time.
    pub async fn run(self, leading: watch::Sender<bool>) {
        let mut last_renew: Option<tokio::time::Instant> = None;
        loop {
            let now = Timestamp::now();
            let ok = match self.try_acquire_or_renew(now).await {
                Ok(ok) => ok,
                Err(e) => {
                    warn!(error = %e, "lease round failed");
                    last_renew.is_some_and(|t| t.elapsed() < self.cfg.lease_duration)
                }
            };
            if ok {
                last_renew = Some(tokio::time::Instant::now());
            }
            if *leading.borrow() != ok {
                info!(leading = ok, identity = %self.cfg.identity, "leadership changed");
                let _ = leading.send(ok);
            }
            tokio::time::sleep(self.cfg.renew_every).await;
        }
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
}
