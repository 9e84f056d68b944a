//! What the node agent knows about a pod, and the status patch that reports it.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// RFC 3339 "now" as the API server expects it in `Time` fields.
pub(crate) fn now() -> String {
    match serde_json::to_value(Time(Timestamp::now())) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

/// How a container ended.
#[derive(Clone, Debug)]
pub(crate) struct Terminated {
    pub(crate) exit_code: i32,
    pub(crate) signal: Option<i32>,
    pub(crate) reason: String,
    pub(crate) message: Option<String>,
    pub(crate) started_at: String,
    pub(crate) finished_at: String,
}

/// The current state of one container.
#[derive(Clone, Debug)]
pub(crate) enum State {
    Waiting { reason: String, message: String },
    Running { started_at: String },
    Terminated(Terminated),
}

/// One container's status as the API shows it.
#[derive(Clone, Debug)]
pub(crate) struct ContainerStatus {
    pub(crate) name: String,
    pub(crate) image: String,
    pub(crate) state: State,
    pub(crate) last: Option<Terminated>,
    pub(crate) restart_count: i32,
    pub(crate) pid: Option<u32>,
    /// When the current process started (monotonic), for probe timing.
    pub(crate) running_since: Option<std::time::Instant>,
    /// Whether a readiness probe exists; without one, running means ready.
    pub(crate) has_probe: bool,
    pub(crate) probe_ok: bool,
    /// Set when the container ended and will not be restarted.
    pub(crate) done: bool,
}

impl ContainerStatus {
    pub(crate) fn new(name: &str, image: &str, has_probe: bool) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            image: image.into(),
            state: State::Waiting {
                reason: "ContainerCreating".into(),
                message: String::new(),
            },
            last: None,
            restart_count: 0,
            pid: None,
            running_since: None,
            has_probe,
            probe_ok: false,
            done: false,
        }
    }

    pub(crate) fn running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }

    pub(crate) fn ready(&self) -> bool {
        self.running() && (!self.has_probe || self.probe_ok)
    }

    fn to_json(&self) -> Value {
        let cid = format!("ari-e2e://{}", self.pid.unwrap_or(0));
        let state = match &self.state {
            State::Waiting { reason, message } => {
                json!({ "waiting": { "reason": reason, "message": message } })
            }
            State::Running { started_at } => json!({ "running": { "startedAt": started_at } }),
            State::Terminated(t) => json!({ "terminated": terminated_json(t, &cid) }),
        };
        let last = match &self.last {
            Some(t) => json!({ "terminated": terminated_json(t, &cid) }),
            None => json!({}),
        };
        json!({
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "containerID": cid,
            "ready": self.ready(),
            "started": self.running(),
            "restartCount": self.restart_count,
            "state": state,
            "lastState": last,
        })
    }
}

fn terminated_json(t: &Terminated, cid: &str) -> Value {
    let mut v = json!({
        "exitCode": t.exit_code,
        "reason": t.reason,
        "startedAt": t.started_at,
        "finishedAt": t.finished_at,
        "containerID": cid,
    });
    if let Some(s) = t.signal {
        v["signal"] = json!(s);
    }
    if let Some(m) = &t.message {
        v["message"] = json!(m);
    }
    v
}

/// Everything the status patch is computed from.
#[derive(Debug)]
pub(crate) struct PodState {
    pub(crate) pod_ip: String,
    pub(crate) start_time: String,
    pub(crate) init: Vec<ContainerStatus>,
    pub(crate) containers: Vec<ContainerStatus>,
    pub(crate) initialized: bool,
    /// Set when an init container failed under restartPolicy Never.
    pub(crate) failed: bool,
    /// Condition type → (status, lastTransitionTime).
    transitions: HashMap<&'static str, (bool, String)>,
}

impl PodState {
    pub(crate) fn new(
        pod_ip: String,
        init: Vec<ContainerStatus>,
        containers: Vec<ContainerStatus>,
    ) -> PodState {
        PodState {
            pod_ip,
            start_time: now(),
            initialized: init.is_empty(),
            init,
            containers,
            failed: false,
            transitions: HashMap::new(),
        }
    }

    /// The pod phase, derived the way the kubelet does.
    pub(crate) fn phase(&self) -> &'static str {
        if self.failed {
            return "Failed";
        }
        if !self.initialized {
            return "Pending";
        }
        if !self.containers.is_empty() && self.containers.iter().all(|c| c.done) {
            let ok = self
                .containers
                .iter()
                .all(|c| matches!(&c.state, State::Terminated(t) if t.exit_code == 0));
            return if ok { "Succeeded" } else { "Failed" };
        }
        let started = self
            .containers
            .iter()
            .any(|c| c.running() || c.restart_count > 0 || matches!(c.state, State::Terminated(_)));
        if started { "Running" } else { "Pending" }
    }

    fn condition(&mut self, kind: &'static str, status: bool) -> Value {
        let entry = self
            .transitions
            .entry(kind)
            .or_insert_with(|| (status, now()));
        if entry.0 != status {
            *entry = (status, now());
        }
        json!({
            "type": kind,
            "status": if status { "True" } else { "False" },
            "lastTransitionTime": entry.1,
            "lastProbeTime": null,
        })
    }

    /// A strategic-merge patch for the pod's status subresource.
    pub(crate) fn patch(&mut self) -> Value {
        let phase = self.phase();
        let ready =
            !self.containers.is_empty() && self.containers.iter().all(ContainerStatus::ready);
        let initialized = self.initialized;
        let conditions = vec![
            self.condition("PodReadyToStartContainers", true),
            self.condition("Initialized", initialized),
            self.condition("ContainersReady", ready),
            self.condition("Ready", ready),
        ];
        json!({
            "status": {
                "phase": phase,
                "conditions": conditions,
                "hostIP": "127.0.0.1",
                "hostIPs": [{ "ip": "127.0.0.1" }],
                "podIP": self.pod_ip,
                "podIPs": [{ "ip": self.pod_ip }],
                "startTime": self.start_time,
                "initContainerStatuses": self.init.iter().map(ContainerStatus::to_json).collect::<Vec<_>>(),
                "containerStatuses": self.containers.iter().map(ContainerStatus::to_json).collect::<Vec<_>>(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(code: i32) -> State {
        State::Terminated(Terminated {
            exit_code: code,
            signal: None,
            reason: "Completed".into(),
            message: None,
            started_at: now(),
            finished_at: now(),
        })
    }

    #[test]
    fn phase_follows_containers() {
        let mut s = PodState::new(
            "127.0.1.1".into(),
            vec![],
            vec![ContainerStatus::new("a", "i", false)],
        );
        assert_eq!(s.phase(), "Pending");
        s.containers[0].state = State::Running { started_at: now() };
        assert_eq!(s.phase(), "Running");
        assert_eq!(s.patch()["status"]["conditions"][3]["status"], "True");
        s.containers[0].state = term(1);
        assert_eq!(
            s.phase(),
            "Running",
            "a restartable container keeps the pod Running"
        );
        s.containers[0].done = true;
        assert_eq!(s.phase(), "Failed");
        s.containers[0].state = term(0);
        assert_eq!(s.phase(), "Succeeded");
    }

    #[test]
    fn readiness_needs_the_probe_when_there_is_one() {
        let mut c = ContainerStatus::new("a", "i", true);
        c.state = State::Running { started_at: now() };
        assert!(!c.ready());
        c.probe_ok = true;
        assert!(c.ready());
    }
}
