//! One Task's path through an executor: claim, run, heartbeat, one final status write.
//!
//! The claim is a status replace carrying the resourceVersion the executor saw: the API server
//! lets exactly one executor win; a conflict means someone else has it (or it changed), and the
//! loser simply moves on — the next watch event brings the task back if it is still claimable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ari_crds::names::{LABEL_AGENT, LABEL_TASK, OUTPUT_KEY, output_configmap_name};
use ari_crds::{InputSource, OutputRef, Task, TaskPhase, TaskReason, TaskStatus};
use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::Worker;
use super::convert::{self, OutputPlacement};
use crate::{TaskOutcome, TaskRequest};

/// How far [`Worker::handle`] got.
enum Handled {
    /// Claimed and finished, or lost to a peer, or finished without running: nothing to do.
    Done,
    /// Not claimed because of an API error (not a conflict): worth trying again.
    NotClaimed(Box<Task>, kube::Error),
}

/// Whether this executor should try to claim `task` now.
pub fn claimable(task: &Task) -> bool {
    task.meta().deletion_timestamp.is_none()
        && matches!(
            task.status.as_ref().and_then(|s| s.phase),
            None | Some(TaskPhase::Pending)
        )
}

impl Worker {
    /// Claims, runs and finishes one task. Errors are logged; the task's fate is in its status.
    /// A claim that failed for another reason than a lost race goes back to the backlog.
    pub async fn handle(self: Arc<Self>, task: Task) {
        let name = task.name_any();
        match self.clone().handle_inner(task).await {
            Ok(Handled::Done) => {}
            Ok(Handled::NotClaimed(task, e)) => {
                warn!(task = %name, error = %e, "claim failed; will try again");
                self.backlog.retry_later(*task);
            }
            Err(e) => warn!(task = %name, error = %e, "task handling failed"),
        }
    }

    async fn handle_inner(self: Arc<Self>, task: Task) -> Result<Handled, kube::Error> {
        let name = task.name_any();
        let generation = task.meta().generation;
        let elapsed = task
            .meta()
            .creation_timestamp
            .as_ref()
            .map(|t| {
                let ms = convert::now().0.as_millisecond() - t.0.as_millisecond();
                Duration::from_millis(u64::try_from(ms).unwrap_or(0))
            })
            .unwrap_or_default();

        // Defence in depth: the operator checks this too, but the executor never runs a task
        // beyond its grants even if it sees the task first.
        let denied = task
            .spec
            .requirements
            .as_ref()
            .and_then(|r| ari_crds::requirements_within_grants(r, &self.agent.spec).err())
            .map(|d| d.to_string())
            .or_else(|| {
                ari_crds::fuel_within_limit(task.spec.fuel, &self.agent.spec)
                    .err()
                    .map(|d| d.to_string())
            });
        if let Some(message) = denied {
            let mut t = task.clone();
            let status = t.status.get_or_insert_with(TaskStatus::default);
            convert::finish_without_run(status, generation, TaskReason::CapabilityDenied, message);
            return match self
                .tasks
                .replace_status(&name, &PostParams::default(), &t)
                .await
            {
                Ok(_) => {
                    self.count(TaskPhase::Failed, TaskReason::CapabilityDenied);
                    Ok(Handled::Done)
                }
                Err(e) if is_conflict(&e) => Ok(Handled::Done),
                Err(e) => Ok(Handled::NotClaimed(Box::new(task), e)),
            };
        }

        // The claim.
        let mut claim = task.clone();
        let status = claim.status.get_or_insert_with(TaskStatus::default);
        let attempt = status.attempts.unwrap_or(0) + 1;
        let now = convert::now();
        status.phase = Some(TaskPhase::Running);
        status.reason = None;
        status.message = Some(format!("running on {}", self.config.pod_name));
        status.executor = Some(self.config.pod_name.clone());
        status.attempts = Some(attempt);
        status.start_time = Some(now.clone());
        status.last_heartbeat_time = Some(now);
        status.observed_generation = generation;
        let mut current = match self
            .tasks
            .replace_status(&name, &PostParams::default(), &claim)
            .await
        {
            Ok(t) => t,
            Err(e) if is_conflict(&e) => {
                self.metrics.claims_lost.inc();
                debug!(task = %name, "claim lost");
                return Ok(Handled::Done);
            }
            Err(e) => return Ok(Handled::NotClaimed(Box::new(task), e)),
        };
        info!(task = %name, attempt, "claimed");

        // An earlier attempt may have committed its storage writes before its executor was
        // lost: finish with what that attempt returned instead of running (and writing) again.
        if attempt > 1
            && let Some(outcome) = self.committed_outcome(&current).await
        {
            info!(task = %name, attempt, "an earlier attempt committed; finishing with its outcome");
            self.finish(current, attempt, &outcome).await?;
            return Ok(Handled::Done);
        }

        let outcome = match self.resolve_input(&current).await {
            Ok(input) => {
                let request = self.request(&current, input, elapsed);
                match request {
                    Ok(req) => Some(self.run_with_heartbeat(&name, req, &mut current).await?),
                    Err(message) => {
                        self.finish_failed(&mut current, TaskReason::HostError, message)
                            .await?;
                        None
                    }
                }
            }
            Err(message) => {
                self.finish_failed(&mut current, TaskReason::HostError, message)
                    .await?;
                None
            }
        };
        if let Some(mut outcome) = outcome {
            // Refused because another attempt of this Task committed meanwhile: its outcome.
            if outcome.storage_conflict
                && let Some(committed) = self.committed_outcome(&current).await
            {
                outcome = committed;
            }
            self.finish(current, attempt, &outcome).await?;
        }
        Ok(Handled::Done)
    }

    /// The outcome an earlier attempt of `task` stored with its storage commit, if any.
    /// Receipts are kept after the final write: an attempt the operator gave away while it
    /// still ran must find it and not commit a second time.
    async fn committed_outcome(&self, task: &Task) -> Option<TaskOutcome> {
        let (uid, mut storage) = (task.uid()?, self.storage.for_task()?);
        let bytes = tokio::task::spawn_blocking(move || storage.receipt(&uid))
            .await
            .ok()?
            .ok()??;
        TaskOutcome::from_receipt(&bytes)
    }

    fn request(
        &self,
        task: &Task,
        input: Vec<u8>,
        elapsed: Duration,
    ) -> Result<TaskRequest, String> {
        let mut req = TaskRequest::new(task.name_any(), input, self.attestation_key.clone());
        req.namespace = Some(self.config.namespace.clone());
        req.uid = task.uid();
        req.requirements = convert::requirements(task);
        req.grants = self.grants.clone();
        req.limits = convert::limits(&self.agent.spec, task, elapsed);
        req.seed = convert::seed(task)?;
        req.storage = self.storage.for_task();
        if req.storage.is_some() {
            req.receipt = task.uid();
        }
        req.executor = self.config.pod_name.clone();
        Ok(req)
    }

    async fn resolve_input(&self, task: &Task) -> Result<Vec<u8>, String> {
        let ns = &self.config.namespace;
        match task.input_source().map_err(|e| e.to_string())? {
            InputSource::Inline(s) => Ok(s.as_bytes().to_vec()),
            InputSource::Base64(s) => base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| format!("spec.inputBase64 is not base64: {e}")),
            InputSource::ConfigMap(r) => {
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
                let cm = api
                    .get(&r.name)
                    .await
                    .map_err(|e| format!("input ConfigMap {}: {e}", r.name))?;
                cm.data
                    .and_then(|d| d.get(&r.key).map(|v| v.as_bytes().to_vec()))
                    .or_else(|| {
                        cm.binary_data
                            .and_then(|d| d.get(&r.key).map(|b| b.0.clone()))
                    })
                    .ok_or_else(|| format!("input ConfigMap {} has no key {:?}", r.name, r.key))
            }
            // Executors hold no Secret access: reading any Secret a Task names would let
            // whoever may create Tasks read the namespace's Secrets through an echo agent.
            InputSource::Secret(r) => Err(format!(
                "input from Secret {}: executors do not read Secrets; pass the input through a \
                 ConfigMap (inputFrom.configMapKeyRef) — see docs/install.md",
                r.name
            )),
        }
    }

    /// Runs on a blocking thread (CPU time is measured per thread) while refreshing the
    /// heartbeat, so the operator can tell a long task from a lost executor.
    async fn run_with_heartbeat(
        &self,
        name: &str,
        req: TaskRequest,
        current: &mut Task,
    ) -> Result<TaskOutcome, kube::Error> {
        let agent = self.runtime_agent.clone();
        self.metrics.active.inc();
        let started = Instant::now();
        let mut run = tokio::task::spawn_blocking(move || agent.run(req));
        let mut beat = tokio::time::interval(self.config.heartbeat);
        beat.tick().await; // the first tick is immediate; the claim was the first heartbeat
        let outcome = loop {
            tokio::select! {
                done = &mut run => break done,
                _ = beat.tick() => {
                    let patch = serde_json::json!({"status": {"lastHeartbeatTime": convert::now()}});
                    match self.tasks.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                        Ok(t) => *current = t,
                        Err(e) => warn!(task = %name, error = %e, "heartbeat failed"),
                    }
                }
            }
        };
        self.metrics.active.dec();
        self.metrics
            .task_seconds
            .observe(started.elapsed().as_secs_f64());
        outcome.map_err(|e| kube::Error::Service(format!("task thread failed: {e}").into()))
    }

    async fn finish_failed(
        &self,
        current: &mut Task,
        reason: TaskReason,
        message: String,
    ) -> Result<(), kube::Error> {
        let name = current.name_any();
        let generation = current.meta().generation;
        let status = current.status.get_or_insert_with(TaskStatus::default);
        convert::finish_without_run(status, generation, reason, message);
        self.tasks
            .replace_status(&name, &PostParams::default(), current)
            .await?;
        self.count(TaskPhase::Failed, reason);
        Ok(())
    }

    /// The one final write. On a conflict the task is re-read: if it is still ours (same
    /// executor, same attempt, still Running) the write is retried; otherwise the operator gave
    /// the task to someone else and this result is dropped, so a task completes exactly once.
    async fn finish(
        &self,
        mut current: Task,
        attempt: u32,
        outcome: &TaskOutcome,
    ) -> Result<(), kube::Error> {
        let name = current.name_any();
        let output_ref = match convert::placement(&outcome.output) {
            OutputPlacement::Inline => None,
            OutputPlacement::ConfigMap => Some(self.store_output(&current, &outcome.output).await?),
        };
        for _ in 0..5 {
            let generation = current.meta().generation;
            let status = current.status.get_or_insert_with(TaskStatus::default);
            convert::finish_with_outcome(status, generation, outcome, output_ref.clone())
                .map_err(kube::Error::SerdeError)?;
            match self
                .tasks
                .replace_status(&name, &PostParams::default(), &current)
                .await
            {
                Ok(done) => {
                    let s = done.status.unwrap_or_default();
                    let (phase, reason) = (
                        s.phase.unwrap_or(TaskPhase::Failed),
                        s.reason.unwrap_or(TaskReason::HostError),
                    );
                    self.count(phase, reason);
                    self.metrics.fuel.inc_by(outcome.resources_used.fuel);
                    info!(task = %name, phase = phase.as_str(), reason = reason.as_str(), fuel = outcome.resources_used.fuel, "finished");
                    return Ok(());
                }
                Err(e) if is_conflict(&e) => {
                    current = self.tasks.get_status(&name).await?;
                    let s = current.status.clone().unwrap_or_default();
                    let ours = s.executor.as_deref() == Some(self.config.pod_name.as_str())
                        && s.attempts == Some(attempt)
                        && s.phase == Some(TaskPhase::Running);
                    if !ours {
                        warn!(task = %name, "task was reassigned while running; dropping this result");
                        return Ok(());
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(kube::Error::Service(
            "final status write kept conflicting".into(),
        ))
    }

    /// Large output goes to a ConfigMap the Task owns (deleted with it).
    async fn store_output(&self, task: &Task, output: &[u8]) -> Result<OutputRef, kube::Error> {
        let name = output_configmap_name(&task.name_any());
        let owner = OwnerReference {
            api_version: Task::api_version(&()).into_owned(),
            kind: Task::kind(&()).into_owned(),
            name: task.name_any(),
            uid: task.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.config.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (LABEL_AGENT.to_string(), self.config.agent.clone()),
                    (LABEL_TASK.to_string(), task.name_any()),
                ])),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            binary_data: Some(BTreeMap::from([(
                OUTPUT_KEY.to_string(),
                ByteString(output.to_vec()),
            )])),
            ..ConfigMap::default()
        };
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.config.namespace);
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => {}
            // A retried attempt may find its predecessor's ConfigMap: replace it.
            Err(e) if is_already_exists(&e) => {
                api.replace(&name, &PostParams::default(), &cm).await?;
            }
            Err(e) => return Err(e),
        }
        Ok(OutputRef {
            config_map: name,
            key: OUTPUT_KEY.to_string(),
        })
    }

    fn count(&self, phase: TaskPhase, reason: TaskReason) {
        self.metrics
            .tasks
            .with_label_values(&[phase.as_str(), reason.as_str()])
            .inc();
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}
