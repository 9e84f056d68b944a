//! One Task's path through an executor: claim, run, heartbeat, one final status write.
//!
//! The claim is a status replace carrying the resourceVersion the executor saw: the API server
//! lets exactly one executor win; a conflict means someone else has it (or it changed), and the
//! loser simply moves on — the next watch event brings the task back if it is still claimable.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ari_crds::{
    InputSource, LiveLog, OutputRef, Task, TaskPhase, TaskReason, TaskStatus, TracePolicy, TraceRef,
};
use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};
use tracing::{debug, info, warn};

use super::Worker;
use super::approvals::KubeApprover;
use super::children::{KubeDelegator, Parent};
use super::convert::{self, OutputPlacement};
use super::error::TaskError;
use super::gate;
use super::parent::ParentCheck;
use super::peers::Peers;
use super::replicas;
use super::slots::Slot;
use super::status::{self, Attempt, Claim, WriteError};
use super::taps::Taps;
use ari_crds::Verdict;
use ari_runtime::CommitGate;
use ari_runtime::capability::DelegationContext;
use ari_runtime::{Failure, FailureKind, TaskOutcome, TaskRequest};

/// How often `status.liveLog` is written at most while a followed Task logs (and the pod's
/// write budget allows it; see [`super::livelog`]).
const LIVE_LOG_INTERVAL: Duration = Duration::from_millis(250);

/// How far [`Worker::handle`] got.
enum Handled {
    /// Claimed and finished, or lost to a peer, or finished without running: nothing to do.
    Done,
    /// Not claimed because of an API error (not a conflict): worth trying again.
    NotClaimed(Box<Task>, kube::Error),
}

impl Worker {
    /// Claims, runs and finishes one task. Errors are logged; the task's fate is in its status.
    /// A claim that failed for another reason than a lost race goes back to the backlog.
    pub async fn handle(self: Arc<Self>, task: Task, slot: Arc<Slot>, peers: &Peers) {
        let name = task.name_any();
        // A replica a Ready peer should run first: looked at again after `steal_after`, so a
        // peer that leaves hands the turn back.
        if !replicas::my_turn(&task, peers) {
            debug!(task = %name, "a peer has run fewer replicas of this Task; leaving it");
            self.backlog.retry_later(task);
            return;
        }
        match self.clone().handle_inner(task, slot).await {
            Ok(Handled::Done) => {}
            Ok(Handled::NotClaimed(task, e)) => {
                warn!(task = %name, error = %e, "claim failed; will try again");
                self.backlog.retry_later(*task);
            }
            Err(e) => warn!(task = %name, error = %e, "task handling failed"),
        }
    }

    async fn handle_inner(
        self: Arc<Self>,
        task: Task,
        slot: Arc<Slot>,
    ) -> Result<Handled, TaskError> {
        let name = task.name_any();
        let elapsed = convert::since_created(&task);

        // Defence in depth: the operator checks this too, but the executor never runs a task
        // beyond its grants even if it sees the task first.
        // A child Task's parent must be real (see [`super::parent`]).
        let admitted = match ari_crds::admit(&task, &self.agent.spec) {
            Ok(()) => match self.check_parent(&task).await {
                Ok(ParentCheck::Admitted) => Ok(()),
                Ok(ParentCheck::Refused(refusal)) => Err(refusal),
                Err(e) => return Ok(Handled::NotClaimed(Box::new(task), e)),
            },
            Err(refusal) => Err(refusal),
        };
        if let Err(refusal) = admitted {
            return match status::refuse(&self.tasks, &task, refusal.reason, &refusal.message).await
            {
                Ok(written) => {
                    if written {
                        warn!(task = %name, reason = refusal.reason.as_str(), message = %refusal.message, "refused");
                        self.count(TaskPhase::Failed, refusal.reason);
                    }
                    Ok(Handled::Done)
                }
                Err(e) => Ok(Handled::NotClaimed(Box::new(task), e)),
            };
        }

        // The claim.
        let mut attempt = match self.writer.claim(&task).await {
            Claim::Won(a) => *a,
            Claim::Lost => {
                self.metrics.claims_lost.inc();
                debug!(task = %name, "claim lost");
                return Ok(Handled::Done);
            }
            Claim::Error(e) => return Ok(Handled::NotClaimed(Box::new(task), e)),
        };
        info!(agent = %self.config.agent, task = %name, attempt = attempt.number, "claimed");

        // An earlier attempt may have committed its storage writes before its executor was
        // lost: finish with what that attempt returned instead of running (and writing) again.
        if attempt.number > 1
            && let Some(outcome) = self.committed_outcome(&attempt.current).await
        {
            info!(task = %name, attempt = attempt.number, "an earlier attempt committed; finishing with its outcome");
            self.finish(&mut attempt, &outcome).await;
            return Ok(Handled::Done);
        }

        if let Some(inputs) = attempt.current.spec.items.clone() {
            self.run_items(&mut attempt, &inputs, slot).await;
            return Ok(Handled::Done);
        }
        let input = match self.resolve_input(&attempt.current).await {
            Ok(input) => input,
            Err((reason, message)) => {
                self.finish_failed(&mut attempt, reason, message).await;
                return Ok(Handled::Done);
            }
        };
        let continued = match self.conversation(&attempt.current).await {
            Ok(continued) => continued,
            Err((reason, message)) => {
                self.finish_failed(&mut attempt, reason, message).await;
                return Ok(Handled::Done);
            }
        };
        // `slot` is held until this Task is finished: the run's delegator only shares it.
        let mut req = match self.request(&attempt, input, elapsed, slot.clone()) {
            Ok(req) => req,
            Err(message) => {
                self.finish_failed(&mut attempt, TaskReason::HostError, message)
                    .await;
                return Ok(Handled::Done);
            }
        };
        if let Some(c) = continued {
            req.history = c.history;
            req.conversation = Some(c.link);
        }
        let lost = Arc::new(AtomicBool::new(false));
        if req.storage.is_some() {
            req.commit_gate = Some(self.commit_gate(&attempt, lost.clone()));
        }
        // Cancellable from the Task watch (spec.cancelled, deletion) while it runs.
        req.cancel = Some(
            self.cancels
                .register(&attempt.uid, attempt.current.is_cancelled()),
        );
        // Live logs follow the Task's lease while it runs (see [`super::livelog`]).
        self.live.register(&attempt.uid, &attempt.current);
        let ran = self.run_with_heartbeat(req, &mut attempt, &lost).await;
        self.live.unregister(&attempt.uid);
        self.cancels.unregister(&attempt.uid);
        let mut outcome = ran?;
        if lost.load(Ordering::Acquire) {
            // Already logged by the heartbeat that found out; nothing of this run is written.
            return Ok(Handled::Done);
        }
        // Refused because another attempt of this Task committed meanwhile: its outcome.
        if outcome.storage_conflict
            && let Some(committed) = self.committed_outcome(&attempt.current).await
        {
            outcome = committed;
        }
        self.finish(&mut attempt, &outcome).await;
        Ok(Handled::Done)
    }

    /// Checked by the runtime just before a storage commit: the commit only happens while the
    /// Task is still this attempt's (the heartbeat may not have noticed yet, so ask the API).
    fn commit_gate(&self, attempt: &Attempt, lost: Arc<AtomicBool>) -> CommitGate {
        let handle = tokio::runtime::Handle::current();
        let tasks = self.tasks.clone();
        let (name, uid, pod, number) = (
            attempt.name.clone(),
            attempt.uid.clone(),
            self.config.pod_name.clone(),
            attempt.number,
        );
        Arc::new(move || {
            if lost.load(Ordering::Acquire) {
                return Err("this executor no longer owns the Task".into());
            }
            let asker = gate::Asker {
                uid: &uid,
                pod: &pod,
                attempt: number,
                patience: gate::PATIENCE,
                first_pause: Duration::from_millis(100),
            };
            // Called on the run's blocking thread, never inside the async runtime.
            match asker.confirm(|| handle.block_on(tasks.get_status(&name))) {
                gate::Verdict::Owned => Ok(()),
                gate::Verdict::Abandon(why) => {
                    // Nothing of this run is written: the Task is someone else's, gone, or (the
                    // API not answering) left for the operator to requeue when the heartbeat
                    // stops, so it runs again instead of failing on an outage.
                    lost.store(true, Ordering::Release);
                    Err(why)
                }
            }
        })
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

    pub(super) fn request(
        &self,
        attempt: &Attempt,
        input: Vec<u8>,
        elapsed: Duration,
        slot: Arc<Slot>,
    ) -> Result<TaskRequest, String> {
        let task = &attempt.current;
        let mut req = TaskRequest::new(task.name_any(), input, self.attestation_key.clone());
        req.namespace = Some(self.config.namespace.clone());
        req.uid = task.uid();
        req.requirements = convert::requirements(task);
        req.grants = self.grants.clone();
        req.config = self.agent_config.clone();
        req.limits = convert::limits(&self.agent.spec, task, elapsed);
        req.seed = convert::seed(task)?.or_else(|| replicas::shared_seed(task));
        req.start_unix_nanos = replicas::shared_start(task);
        req.storage = self.storage.for_task();
        if req.storage.is_some() {
            req.receipt = Some(attempt.uid.clone());
        }
        req.executor = self.config.pod_name.clone();
        if self.grants.spec().may_ask_approval() {
            req.approver = Some(Arc::new(KubeApprover {
                handle: tokio::runtime::Handle::current(),
                tasks: self.tasks.clone(),
                task: task.name_any(),
                slot: slot.clone(),
                memory_bytes: req.limits.memory_bytes,
            }));
        }
        if self.grants.spec().delegation.is_some() {
            req.delegation = Some(self.delegation_context(task, slot)?);
        }
        Ok(req)
    }

    /// Children of this task become Task objects (see [`super::children`]).
    fn delegation_context(
        &self,
        task: &Task,
        slot: Arc<Slot>,
    ) -> Result<DelegationContext, String> {
        let uid = task.uid().ok_or_else(|| "the Task has no uid".to_owned())?;
        let delegator = KubeDelegator {
            handle: tokio::runtime::Handle::current(),
            tasks: self.tasks.clone(),
            agents: Api::namespaced(self.client.clone(), &self.config.namespace),
            configmaps: self.writer.configmaps.clone(),
            parent: Parent {
                name: task.name_any(),
                uid,
                agent: self.config.agent.clone(),
                namespace: self.config.namespace.clone(),
                retries: task.spec.retries,
                pool: self.config.pool.as_ref().map(|p| p.name.clone()),
            },
            slot,
        };
        Ok(DelegationContext {
            delegator: Arc::new(delegator),
            depth: task.spec.parent.as_ref().map_or(0, |p| p.depth),
        })
    }

    /// The Task's input, or the reason and message it fails with (before any instance runs).
    pub(super) async fn resolve_input(&self, task: &Task) -> Result<Vec<u8>, (TaskReason, String)> {
        let host = |m: String| (TaskReason::HostError, m);
        match task.input_source().map_err(|e| host(e.to_string()))? {
            InputSource::Inline(s) => Ok(s.as_bytes().to_vec()),
            // Each item is its own run's input (see [`super::items`]), never the Task's.
            InputSource::Items(_) => Err(host("a Task of items has no single input".into())),
            InputSource::Base64(s) => base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| host(format!("spec.inputBase64 is not base64: {e}"))),
            InputSource::ConfigMap(r) => {
                let cm = self
                    .writer
                    .configmaps
                    .get(&r.name)
                    .await
                    .map_err(|e| host(format!("input ConfigMap {}: {e}", r.name)))?;
                input_from_configmap(cm, &r.name, &r.key)
            }
            // Executors hold no Secret access: reading any Secret a Task names would let
            // whoever may create Tasks read the namespace's Secrets through an echo agent.
            InputSource::Secret(r) => Err(host(format!(
                "input from Secret {}: executors do not read Secrets; pass the input through a \
                 ConfigMap (inputFrom.configMapKeyRef) — see docs/install.md",
                r.name
            ))),
        }
    }

    /// Runs on a blocking thread (CPU time is measured per thread) while refreshing the
    /// heartbeat, so the operator can tell a long task from a lost executor. A heartbeat that
    /// finds the Task no longer ours sets `lost`: the run's result will be dropped.
    pub(super) async fn run_with_heartbeat(
        &self,
        mut req: TaskRequest,
        attempt: &mut Attempt,
        lost: &AtomicBool,
    ) -> Result<TaskOutcome, TaskError> {
        let agent = self.runtime_agent.clone();
        self.metrics.active.inc();
        let started = Instant::now();
        // The guest's log lines (target `ari::guest`) are emitted while it runs, on this
        // thread: the span tags each with its Task, so `kubectl logs ... | grep TASK` finds them,
        // and with its Agent, which a pool pod's lines need to be told apart by Agent.
        let span = tracing::info_span!(
            "task",
            namespace = %attempt.current.namespace().unwrap_or_default(),
            agent = %self.config.agent,
            task = %attempt.name,
            attempt = attempt.number
        );
        let mut taps = Taps::attach(&mut req, self.live.clone(), &attempt.uid);
        let mut live = LiveLog::default();
        let mut unpublished = false;
        // Whether a stream followed this run at some point: only then does the final status
        // carry the newest lines.
        let mut was_followed = false;
        let mut run = self.cpu.spawn(move |watch| {
            req.cpu_watch = watch;
            span.in_scope(|| agent.run(req))
        })?;
        let mut beat = tokio::time::interval(self.config.heartbeat);
        beat.tick().await; // the first tick is immediate; the claim was the first heartbeat
        let mut publish = tokio::time::interval(LIVE_LOG_INTERVAL);
        let outcome = loop {
            tokio::select! {
                done = &mut run => break done,
                () = taps.next_into(&mut live) => unpublished = true,
                _ = publish.tick(), if unpublished && !lost.load(Ordering::Acquire) => {
                    if !self.live.followed(&attempt.uid) {
                        continue;
                    }
                    was_followed = true;
                    // Over the pod's budget: the lines wait for a later tick (or the final write).
                    if !self.live.budget.take() {
                        self.metrics.live_log_deferred.inc();
                        continue;
                    }
                    unpublished = false;
                    self.metrics.live_log_writes.inc();
                    if let Err(e) = self.writer.live_log(attempt, &live).await {
                        debug!(task = %attempt.name, error = %e, "live log not written");
                    }
                }
                _ = beat.tick(), if !lost.load(Ordering::Acquire) => {
                    match self.writer.heartbeat(attempt).await {
                        Ok(()) => {}
                        Err(WriteError::NotOurs(why)) => {
                            lost.store(true, Ordering::Release);
                            self.metrics.dropped.inc();
                            warn!(task = %attempt.name, attempt = attempt.number, %why, "no longer this executor's; its result will be dropped");
                        }
                        Err(e @ (WriteError::Api(_) | WriteError::KeptChanging)) => warn!(task = %attempt.name, error = %e, "heartbeat failed"),
                    }
                }
            }
        };
        // Lines not yet published go out with the final status write, when a stream follows
        // (or followed) the Task.
        was_followed |= self.live.followed(&attempt.uid);
        if was_followed {
            taps.drain_into(&mut live);
            attempt.live_log = Some(live);
        }
        self.metrics.active.dec();
        self.metrics
            .task_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(outcome?)
    }

    /// Ends the attempt Failed without a run.
    pub(super) async fn finish_failed(
        &self,
        attempt: &mut Attempt,
        reason: TaskReason,
        message: String,
    ) {
        let fill = move |s: &mut TaskStatus, generation: Option<i64>| {
            // The attempt is ours (checked before the fill), so the Task is Running.
            let _ = s.fail(reason, &message, generation, convert::now());
        };
        self.write_final(attempt, &fill, 0).await;
    }

    /// The one final write of a run's outcome. Large output goes to a ConfigMap first; output
    /// that cannot be placed fails the Task in that same one write (never left Running).
    async fn finish(&self, attempt: &mut Attempt, outcome: &TaskOutcome) {
        let record = replicas::record(&self.config.pod_name, outcome);
        let status = attempt.current.status.clone().unwrap_or_default();
        let verdict = replicas::judge(&attempt.current, &status, &record);
        let output_ref = match convert::placement(&outcome.output) {
            _ if !replicas::keeps_output(&verdict) => None,
            OutputPlacement::Inline => None,
            OutputPlacement::ConfigMap => {
                match self.writer.store_output(attempt, &outcome.output).await {
                    Ok(r) => Some(r),
                    Err((reason, message)) => {
                        warn!(task = %attempt.name, %message, "output not stored; failing the task");
                        let kind = match reason {
                            TaskReason::OutputTooLarge => FailureKind::OutputTooLarge,
                            _ => FailureKind::HostError,
                        };
                        let mut failed = outcome.clone();
                        failed.output = Vec::new();
                        failed.failure = Some(Failure::new(kind, message));
                        return self.finish_outcome(attempt, &failed, None).await;
                    }
                }
            }
        };
        self.finish_outcome(attempt, outcome, output_ref).await;
    }

    /// Keeps the run's trace beside the Task when it asks (`spec.trace: Keep`, or its Agent's
    /// default): compressed, in a ConfigMap it owns. A trace that cannot be kept is said so in
    /// the status; the run's result stands.
    async fn keep_trace(&self, attempt: &Attempt, outcome: &TaskOutcome) -> Option<TraceRef> {
        let policy = attempt
            .current
            .spec
            .trace
            .or(self.agent.spec.trace)
            .unwrap_or_default();
        if policy != TracePolicy::Keep {
            return None;
        }
        let gz = match outcome.trace.to_gzip() {
            Ok(gz) => gz,
            Err(e) => {
                return Some(TraceRef::not_kept(
                    0,
                    format!("the trace could not be encoded: {e}"),
                ));
            }
        };
        let bytes = gz.len() as u64;
        if gz.len() > super::status::CONFIGMAP_MAX_BYTES - 1024 {
            let why = format!(
                "the compressed trace is {bytes} bytes, more than a ConfigMap holds ({} bytes)",
                super::status::CONFIGMAP_MAX_BYTES
            );
            return Some(TraceRef::not_kept(bytes, why));
        }
        Some(match self.writer.store_trace(attempt, &gz).await {
            Ok(name) => TraceRef {
                config_map: Some(name),
                key: Some(ari_crds::names::TRACE_KEY.to_owned()),
                compressed_bytes: bytes,
                not_kept: None,
            },
            Err(why) => {
                warn!(task = %attempt.name, %why, "trace not kept");
                TraceRef::not_kept(bytes, why)
            }
        })
    }

    async fn finish_outcome(
        &self,
        attempt: &mut Attempt,
        outcome: &TaskOutcome,
        output_ref: Option<OutputRef>,
    ) {
        let record = replicas::record(&self.config.pod_name, outcome);
        let status = attempt.current.status.clone().unwrap_or_default();
        let trace_ref = match replicas::judge(&attempt.current, &status, &record) {
            Verdict::Next => None,
            _ => self.keep_trace(attempt, outcome).await,
        };
        let task = attempt.current.clone();
        let fill = |s: &mut TaskStatus, generation: Option<i64>| {
            // The attempt is ours (checked before the fill), so the Task is Running.
            let _ =
                replicas::write_ending(s, &task, &record, outcome, output_ref.clone(), generation);
            s.trace_ref = trace_ref.clone();
        };
        self.metrics
            .delegations_refused
            .inc_by(u64::from(outcome.delegations_refused));
        let started = outcome
            .children
            .iter()
            .filter(|c| c.reason.as_deref() != Some("Unavailable"))
            .count();
        self.metrics
            .children_started
            .inc_by(u64::try_from(started).unwrap_or(u64::MAX));
        // Tokens were spent whether or not the status write below succeeds.
        self.metrics.record_models(&outcome.models);
        self.write_final(attempt, &fill, outcome.resources_used.fuel)
            .await;
    }

    /// Writes the ending while the attempt is ours. A write the API server refuses for another
    /// reason than ownership (e.g. invalid) is replaced by a plain HostError ending, so the
    /// Task never stays Running because its result could not be recorded.
    pub(super) async fn write_final(
        &self,
        attempt: &mut Attempt,
        fill: &(dyn Fn(&mut TaskStatus, Option<i64>) + Sync),
        fuel: u64,
    ) {
        let name = attempt.name.clone();
        // A child's status names its parent, however it ended.
        let parent = attempt.current.spec.parent.as_ref().map(|p| p.name.clone());
        let with_parent = move |s: &mut TaskStatus, generation: Option<i64>| {
            fill(s, generation);
            s.parent = parent.clone();
        };
        let fill: &(dyn Fn(&mut TaskStatus, Option<i64>) + Sync) = &with_parent;
        let mut result = self.writer.finish(attempt, fill).await;
        if let Err(WriteError::Api(e)) = &result {
            warn!(task = %name, error = %e, "final status refused; recording a HostError ending instead");
            let message = format!("the executor could not record this Task's result: {e}");
            let fallback = move |s: &mut TaskStatus, generation: Option<i64>| {
                let _ = s.fail(TaskReason::HostError, &message, generation, convert::now());
            };
            result = self.writer.finish(attempt, &fallback).await;
        }
        match result {
            Ok(s) if s.current_phase() == TaskPhase::Pending => {
                // A verified Task's replica: recorded; the next claim runs the next one.
                self.metrics.fuel.inc_by(fuel);
                info!(task = %name, replicas = s.replicas.len(), fuel, "replica recorded");
            }
            Ok(s) => {
                let (phase, reason) = (
                    s.phase.unwrap_or(TaskPhase::Failed),
                    s.reason.unwrap_or(TaskReason::HostError),
                );
                self.count(phase, reason);
                self.metrics.fuel.inc_by(fuel);
                info!(agent = %self.config.agent, task = %name, phase = phase.as_str(), reason = reason.as_str(), fuel, "finished");
            }
            Err(WriteError::NotOurs(why)) => {
                self.metrics.dropped.inc();
                warn!(task = %name, attempt = attempt.number, %why, "no longer this executor's; dropping this result");
            }
            Err(e @ (WriteError::Api(_) | WriteError::KeptChanging)) => {
                warn!(task = %name, error = %e, "final status write failed");
            }
        }
    }

    fn count(&self, phase: TaskPhase, reason: TaskReason) {
        self.metrics.count(phase, reason);
    }
}

/// Label that marks a ConfigMap as readable as Task input (`"true"`). Without it a Task could
/// read any ConfigMap of the namespace through an echo-like Agent.
pub const LABEL_TASK_INPUT: &str = "ari.dev/task-input";

/// The input a ConfigMap gives, if it is marked for Task input.
fn input_from_configmap(
    cm: ConfigMap,
    name: &str,
    key: &str,
) -> Result<Vec<u8>, (TaskReason, String)> {
    let marked = cm
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_TASK_INPUT))
        .is_some_and(|v| v == "true");
    if !marked {
        return Err((
            TaskReason::CapabilityDenied,
            format!(
                "input ConfigMap {name} is not marked for Task input: label it \
                 {LABEL_TASK_INPUT}=\"true\" to let Tasks read it (see docs/capabilities.md)"
            ),
        ));
    }
    cm.data
        .and_then(|d| d.get(key).map(|v| v.as_bytes().to_vec()))
        .or_else(|| cm.binary_data.and_then(|d| d.get(key).map(|b| b.0.clone())))
        .ok_or_else(|| {
            (
                TaskReason::HostError,
                format!("input ConfigMap {name} has no key {key:?}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(labels: &[(&str, &str)]) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "settings",
                         "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string()))
                             .collect::<std::collections::BTreeMap<_, _>>()},
            "data": {"k": "secret-ish"},
        }))
        .unwrap_or_else(|e| panic!("configmap: {e}"))
    }

    #[test]
    fn a_configmap_not_marked_for_task_input_is_refused_as_capability_denied() {
        for labels in [&[][..], &[(LABEL_TASK_INPUT, "false")], &[("app", "x")]] {
            let (reason, message) =
                input_from_configmap(cm(labels), "settings", "k").expect_err("refused");
            assert_eq!(reason, TaskReason::CapabilityDenied);
            assert!(message.contains(LABEL_TASK_INPUT), "{message}");
        }
    }

    #[test]
    fn a_configmap_marked_for_task_input_is_read() {
        let input = input_from_configmap(cm(&[(LABEL_TASK_INPUT, "true")]), "settings", "k");
        assert_eq!(input, Ok(b"secret-ish".to_vec()));
        let missing = input_from_configmap(cm(&[(LABEL_TASK_INPUT, "true")]), "settings", "x");
        assert!(matches!(missing, Err((TaskReason::HostError, _))));
    }
}
