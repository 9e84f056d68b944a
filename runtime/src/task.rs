//! One task: its request, its outcome, and running it in a fresh `Store`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ari_model::{CapabilityName, Estimate, ModelCalls};
use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};
use wasmtime::Store;

use crate::attestation::{Attestation, Claims, TaskIdentity, sha256_hex};
use crate::bindings::{ErrorCode, ExecutionResult, TaskSpec};
use crate::cancel::CancelToken;
use crate::capability::conversation::ConversationCapability;
use crate::capability::delegation::{ChildSummary, TaskDelegation};
use crate::capability::log::LogCapability;
use crate::capability::model::{self, ModelCapability};
use crate::capability::storage::{MemoryBackend, StorageBackend, TaskStorage};
use crate::capability::tools;
use crate::capability::{
    CapError, CapUsage, DelegationContext, Grants, LogTap, Mode, TaskCapabilities, TaskSetup,
};
use crate::engine::deadline_ticks;
use crate::failure::{Failure, FailureKind, classify_call_error};
use crate::limits::{Limits, LimitsApplied, MemoryLimiter};
use crate::metering::{ResourcesUsed, cpu_millis_since, thread_cpu_nanos};
use crate::runtime::{LoadedAgent, error_chain};
use crate::state::{SharedCaps, TaskState};
use crate::trace::Trace;
use crate::wasi;

/// Everything needed to run one task. Build with [`TaskRequest::new`] and set what differs.
pub struct TaskRequest {
    /// Task name (passed to the guest as `task-spec.id`; signed as `task.name`).
    pub id: String,
    /// The Task's namespace and UID, when known (signed in the attestation's `task`).
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub input: Vec<u8>,
    /// Capability names the task needs; each must be granted or the task fails
    /// `CapabilityDenied` before any instance is created.
    pub requirements: Vec<CapabilityName>,
    pub grants: Grants,
    pub limits: Limits,
    /// PRNG seed; generated (and recorded in the attestation) when `None`.
    pub seed: Option<[u8; 32]>,
    /// The agent's storage; `None` gives a storage grant an empty in-memory store.
    pub storage: Option<Box<dyn StorageBackend>>,
    /// Who runs it (pod or host name), recorded in the attestation.
    pub executor: String,
    /// The executor's attestation key.
    pub attestation_key: Arc<SigningKey>,
    /// Start of the logical clock, ns since the Unix epoch; `None` = now.
    pub start_unix_nanos: Option<u64>,
    /// Re-execute from this recorded trace instead of touching storage, network or time.
    pub replay: Option<Trace>,
    /// Leave a receipt under this id with the storage commit (see
    /// [`crate::capability::storage::Batch::receipt`]): the worker sets the Task's UID, so a
    /// retry after a lost executor returns the committed outcome instead of writing twice.
    pub receipt: Option<String>,
    /// Asked just before the storage commit; `Err(why)` skips the commit and fails the run
    /// (the worker: this executor no longer owns the Task's attempt, so nothing may land).
    pub commit_gate: Option<CommitGate>,
    /// Handed to the guest's `initialize` (the Agent's `spec.config`); empty by default. Its
    /// digest is signed (`configSha256`): it changes what the guest does.
    pub config: Vec<u8>,
    /// Cancels the run from another thread: the guest is interrupted within
    /// [`crate::cancel::CHECK_INTERVAL`] and the task ends `Cancelled`, committing nothing.
    pub cancel: Option<CancelToken>,
    /// What runs this task's children (capability `delegation`) and its depth in the tree;
    /// `None`: no other Agent is reachable.
    pub delegation: Option<DelegationContext>,
    /// Sees each kept guest log line as it is written (live views); `None`: only the log
    /// kept in the outcome.
    pub log_tap: Option<LogTap>,
    /// Sees the text of the task's model calls as the model produces it (A2A followers);
    /// `None`: calls are never streamed.
    pub model_tap: Option<Arc<dyn crate::capability::ModelTap>>,
    /// Sees the task's tool calls as they are made (A2A followers); `None`: nobody does.
    pub tool_tap: Option<Arc<dyn crate::capability::ToolTap>>,
    /// Decides calls that need approval (tools, delegation, network); `None`: such calls are
    /// rejected.
    pub approver: Option<Arc<dyn crate::capability::Approver>>,
    /// The earlier turns of the conversation this task continues, for the guest's `history`
    /// (empty in a replay, which reads them from the trace).
    pub history: Vec<ari_model::Turn>,
    /// Where this task sits in its conversation, signed in the attestation.
    pub conversation: Option<ari_model::ConversationLink>,
    /// Told on the guest's thread once the task has used so much CPU (an executor lowers
    /// that thread's priority); `None`: nobody is.
    pub cpu_watch: Option<crate::interrupt::CpuWatch>,
}

/// See [`TaskRequest::commit_gate`].
pub type CommitGate = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

impl TaskRequest {
    /// A request with no grants, default limits and a generated seed.
    pub fn new(id: impl Into<String>, input: impl Into<Vec<u8>>, key: Arc<SigningKey>) -> Self {
        Self {
            id: id.into(),
            namespace: None,
            uid: None,
            input: input.into(),
            requirements: Vec::new(),
            grants: Grants::default(),
            limits: Limits::default(),
            seed: None,
            storage: None,
            executor: default_executor_name(),
            attestation_key: key,
            start_unix_nanos: None,
            replay: None,
            receipt: None,
            commit_gate: None,
            config: Vec::new(),
            cancel: None,
            delegation: None,
            log_tap: None,
            model_tap: None,
            tool_tap: None,
            approver: None,
            history: Vec::new(),
            conversation: None,
            cpu_watch: None,
        }
    }
}

/// Whether another run of this task already committed (its receipt exists): running again
/// would only conflict again.
fn receipt_exists(req: &mut TaskRequest) -> bool {
    match (&req.receipt, req.storage.as_mut()) {
        (Some(id), Some(storage)) => storage.receipt(id).ok().flatten().is_some(),
        _ => false,
    }
}

/// The host name, else `"ari"`.
pub fn default_executor_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "ari".to_string())
}

/// What came of a task. Serialized camelCase; the fields map onto `Task.status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskOutcome {
    pub task_id: String,
    /// The output (empty on failure), base64 in JSON.
    #[serde(with = "b64")]
    pub output: Vec<u8>,
    pub output_sha256: String,
    pub resources_used: ResourcesUsed,
    pub limits_applied: LimitsApplied,
    /// Each model called: calls and tokens, and which endpoint and model id answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelCalls>,
    /// Signed statement of this run (present for every task that reached the runtime).
    pub attestation: Attestation,
    /// `None` when the task succeeded.
    pub failure: Option<Failure>,
    /// The agent's own `estimate` of this task, when it gave one (recorded, never enforced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Estimate>,
    /// The recorded host-call trace (its digest is `attestation.traceSha256`).
    pub trace: Trace,
    /// What the guest logged (host `log`, stdout as INFO, stderr as WARN), as `LEVEL message`,
    /// bounded to 64 KiB.
    pub logs: Vec<String>,
    /// The children it started (capability `delegation`), in order, with how each ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildSummary>,
    /// Delegation calls the grant or its limits refused (depth, children, not granted): a
    /// guest delegating in a tight loop shows here.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delegations_refused: u32,
    /// The guest ended its turn asking for input (a success): the Task ends `InputRequired`,
    /// its output the question.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub input_required: bool,
    /// Rebuilt from a storage receipt: the committed run's output bytes were not kept (only
    /// `output_sha256`), see [`TaskOutcome::from_receipt`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_not_kept: bool,
    /// The storage commit was refused because a key this task read changed meanwhile (the
    /// runtime runs such a task again; never set on a returned outcome unless runs ran out).
    #[serde(skip)]
    pub storage_conflict: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl TaskOutcome {
    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
    }

    pub fn failure_kind(&self) -> Option<FailureKind> {
        self.failure.as_ref().map(|f| f.kind)
    }
}

/// What the guest calls produced, before classification.
enum GuestEnd {
    Done(ExecutionResult),
    Failed(Failure),
}

/// What the guest calls produced and what the agent estimated on the way.
struct GuestRun {
    end: GuestEnd,
    estimate: Option<Estimate>,
}

impl GuestRun {
    /// A run that ended before the guest did anything.
    fn failed(failure: Failure) -> Self {
        Self {
            end: GuestEnd::Failed(failure),
            estimate: None,
        }
    }
}

/// Most runs of one task whose storage commit keeps losing to concurrent tasks. 16 was seen
/// to run out in the e2e soak (one `counter` executor, every Task incrementing one key, on 2
/// busy cores): a task lost 16 rounds in a row and failed `HostError`. 32 rounds of the
/// backoff below add at most about 2 s to such a task.
pub const MAX_STORAGE_RUNS: u32 = 32;

/// The pause before re-run `attempt` (1-based) of a task that lost a storage commit: random in
/// `[0, min(2^attempt, 64)]` ms. Without it, tasks contending for one key on a busy machine
/// re-run in lock step and one can lose all [`MAX_STORAGE_RUNS`] times (seen with 8 threads on
/// 2 cores); random spread lets one of them commit each round.
fn conflict_backoff(attempt: u32) -> Duration {
    use rand_core::RngCore;
    let cap_ms = 1u64 << attempt.min(6);
    let jitter = u64::from(rand_core::OsRng.next_u32()) % (cap_ms * 1000 + 1);
    Duration::from_micros(jitter)
}

impl TaskRequest {
    /// The same request again, on a new handle of the same store (live runs with storage only).
    fn again(&self) -> Option<TaskRequest> {
        if self.replay.is_some() {
            return None;
        }
        Some(TaskRequest {
            id: self.id.clone(),
            namespace: self.namespace.clone(),
            uid: self.uid.clone(),
            input: self.input.clone(),
            requirements: self.requirements.clone(),
            grants: self.grants.clone(),
            limits: self.limits.clone(),
            seed: self.seed,
            storage: Some(self.storage.as_ref()?.handle()),
            executor: self.executor.clone(),
            attestation_key: self.attestation_key.clone(),
            start_unix_nanos: self.start_unix_nanos,
            replay: None,
            receipt: self.receipt.clone(),
            commit_gate: self.commit_gate.clone(),
            config: self.config.clone(),
            cancel: self.cancel.clone(),
            delegation: self.delegation.clone(),
            log_tap: self.log_tap.clone(),
            model_tap: self.model_tap.clone(),
            tool_tap: self.tool_tap.clone(),
            approver: self.approver.clone(),
            history: self.history.clone(),
            conversation: self.conversation.clone(),
            cpu_watch: self.cpu_watch.clone(),
        })
    }
}

/// What a storage receipt keeps of a committed outcome: digests and the signed attestation,
/// never the output, trace or logs, so a receipt stays a few KiB whatever the task returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Receipt {
    task_id: String,
    output_sha256: String,
    output_bytes: u64,
    resources_used: ResourcesUsed,
    limits_applied: LimitsApplied,
    attestation: Attestation,
}

impl TaskOutcome {
    /// The receipt stored with this outcome's storage commit (see [`Receipt`]).
    pub fn receipt_bytes(&self) -> Vec<u8> {
        let receipt = Receipt {
            task_id: self.task_id.clone(),
            output_sha256: self.output_sha256.clone(),
            output_bytes: self.output.len() as u64,
            resources_used: self.resources_used,
            limits_applied: self.limits_applied.clone(),
            attestation: self.attestation.clone(),
        };
        serde_json::to_vec(&receipt).unwrap_or_default()
    }

    /// The committed outcome a receipt stands for, if it parses. Its output bytes are not
    /// kept: `output` is empty, `output_sha256` and the attestation name the committed output,
    /// and `output_not_kept` says so (a retried Task reports this instead of running again).
    pub fn from_receipt(bytes: &[u8]) -> Option<TaskOutcome> {
        let r: Receipt = serde_json::from_slice(bytes).ok()?;
        Some(TaskOutcome {
            task_id: r.task_id,
            output: Vec::new(),
            output_not_kept: r.output_bytes > 0,
            output_sha256: r.output_sha256,
            resources_used: r.resources_used,
            limits_applied: r.limits_applied,
            models: r
                .attestation
                .statement()
                .map(|s| s.predicate.models)
                .unwrap_or_default(),
            attestation: r.attestation,
            failure: None,
            estimate: None,
            trace: Trace::default(),
            logs: Vec::new(),
            children: Vec::new(),
            delegations_refused: 0,
            input_required: false,
            storage_conflict: false,
        })
        .map(|mut o| {
            o.input_required = o
                .attestation
                .statement()
                .is_ok_and(|s| s.predicate.ending.reason == ari_model::TaskReason::InputRequired);
            o
        })
    }
}

impl LoadedAgent {
    /// Runs one task to completion on the calling thread (blocking; pick the thread — CPU
    /// time is measured on it). Never panics on guest behaviour; every failure is classified.
    ///
    /// Storage is optimistic: a task whose commit finds a key it read changed by a concurrent
    /// task runs again from the start (fresh instance, new reads) after a short random pause,
    /// up to [`MAX_STORAGE_RUNS`] times, so concurrent tasks never lose each other's updates.
    pub fn run(&self, req: TaskRequest) -> TaskOutcome {
        let mut req = req;
        for attempt in 1..MAX_STORAGE_RUNS {
            let next = req.again();
            let outcome = self.run_once(req);
            match next {
                Some(mut next) if outcome.storage_conflict => {
                    if receipt_exists(&mut next) {
                        return outcome;
                    }
                    std::thread::sleep(conflict_backoff(attempt));
                    req = next;
                }
                _ => return outcome,
            }
        }
        self.run_once(req)
    }

    /// One run: the capabilities, the guest (unless a check refuses it first), the ending,
    /// the sealed outcome and, for a run that succeeded, the storage commit.
    fn run_once(&self, mut req: TaskRequest) -> TaskOutcome {
        let started = Instant::now();
        let cpu_start = thread_cpu_nanos();
        let seed = req.seed.unwrap_or_else(random_seed);
        let applied = self.applied_limits(&req);
        let caps: SharedCaps = Arc::new(Mutex::new(capabilities(&mut req, &applied, seed)));
        let (run, meter) = match precheck(&req, &applied) {
            Some(failure) => (GuestRun::failed(failure), StoreMeter::default()),
            None => self.execute(&req, &applied, seed, &caps, cpu_start),
        };

        // The store (and with it every WASI adapter) is gone: the state is ours again.
        // (Should a clone survive, the lock still gives exclusive access.)
        let mut caps = crate::state::lock(&caps);
        let left = Leftovers::take(&mut caps);
        let failure = ending(
            &run.end,
            applied.max_output_bytes,
            &left.denials,
            req.cancel.as_ref().is_some_and(CancelToken::is_cancelled),
            left.replay_left,
        );
        let wall = started.elapsed();
        let resources = ResourcesUsed {
            fuel: meter.fuel,
            cpu_millis: cpu_millis_since(cpu_start, wall),
            memory_bytes: meter.peak_memory,
            storage_bytes: left.usage.storage_bytes_written,
            network_bytes: left.usage.network_bytes,
            wall_millis: u64::try_from(wall.as_millis()).unwrap_or(u64::MAX),
            children_fuel: left.usage.children_fuel,
            children_tokens: left.usage.children_tokens,
            tool_calls: left.usage.tool_calls,
            ..ResourcesUsed::default()
        };
        let mut resources = resources;
        resources.add_tokens(&left.models);
        let sealer = Sealer {
            agent: self,
            req: &req,
            seed,
            applied,
            resources,
            estimate: run.estimate,
            models: left.models,
            children: left.children,
            delegations_refused: left.usage.delegations_refused,
            asked_for_input: left.asked_for_input,
        };
        match (failure, run.end) {
            (None, GuestEnd::Done(result)) => {
                // Sealed before the commit, so the receipt stored with the writes is exactly
                // what this run returns.
                let outcome = sealer.seal(None, result.output, left.trace, left.logs);
                sealer.commit(caps, outcome)
            }
            (failure, _) => sealer.seal(failure, Vec::new(), left.trace, left.logs),
        }
    }

    /// The limits really enforced: the request's, with memory clamped to the pool slot.
    fn applied_limits(&self, req: &TaskRequest) -> LimitsApplied {
        let inner = &self.runtime.inner;
        let memory = match inner.max_memory_bytes {
            Some(max) => req.limits.memory_bytes.min(max),
            None => req.limits.memory_bytes,
        };
        let mut applied = LimitsApplied {
            fuel: if inner.consume_fuel {
                req.limits.fuel
            } else {
                0
            },
            memory_bytes: memory,
            timeout_millis: u64::try_from(req.limits.timeout.as_millis()).unwrap_or(u64::MAX),
            max_output_bytes: req.limits.max_output_bytes,
            max_input_bytes: req.limits.max_input_bytes,
            capabilities: req.grants.names(),
            ..LimitsApplied::default()
        };
        let depth = req.delegation.as_ref().map_or(0, |c| c.depth);
        req.grants.spec().record(&mut applied, depth);
        // A task that delegates has a token budget too: its children draw theirs from it.
        if req.grants.grants(CapabilityName::Models)
            || req.grants.grants(CapabilityName::Delegation)
        {
            applied.tokens = Some(req.limits.tokens);
        }
        if req.grants.grants(CapabilityName::Models) {
            for granted in &mut applied.models {
                granted.endpoint = req.grants.models().get(&granted.name).map(model::applied);
            }
        }
        for granted in &mut applied.tools {
            granted.url = req.grants.tools().get(&granted.name).map(tools::applied);
        }
        applied
    }

    /// Instantiates in a fresh store and calls `initialize`, `can-execute`, `estimate`,
    /// `execute`.
    fn execute(
        &self,
        req: &TaskRequest,
        applied: &LimitsApplied,
        seed: [u8; 32],
        caps: &SharedCaps,
        cpu_start: u64,
    ) -> (GuestRun, StoreMeter) {
        let inner = &self.runtime.inner;
        let state = TaskState {
            wasi: wasi::build_ctx(caps, req.grants.grants(CapabilityName::TimeAccess), &seed),
            table: crate::limits::resource_table(),
            caps: caps.clone(),
            limiter: MemoryLimiter::new(applied.memory_bytes),
            host_failures: Vec::new(),
            host_fuel: 0,
        };
        let mut store = Store::new(&inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        if inner.consume_fuel
            && let Err(e) = store.set_fuel(applied.fuel)
        {
            let f = Failure::new(
                FailureKind::HostError,
                format!("cannot set fuel: {}", error_chain(&e)),
            );
            return (GuestRun::failed(f), StoreMeter::default());
        }
        let timeout = Duration::from_millis(applied.timeout_millis);
        crate::interrupt::arm(
            &mut store,
            deadline_ticks(timeout),
            req.cancel.clone(),
            req.cpu_watch.clone(),
            cpu_start,
        );
        if let Some(deadline) = Instant::now().checked_add(timeout) {
            crate::state::lock(caps).set_deadline(deadline);
        }

        let spec = TaskSpec {
            id: req.id.clone(),
            input: req.input.clone(),
            requirements: req
                .requirements
                .iter()
                .map(|c| c.as_str().to_owned())
                .collect(),
            deadline_seconds: applied.timeout_millis.div_ceil(1000),
        };
        let run = call_guest(&self.pre, &mut store, &spec, &req.config);

        let meter = StoreMeter {
            fuel: if inner.consume_fuel {
                applied.fuel.saturating_sub(store.get_fuel().unwrap_or(0))
            } else {
                0
            },
            peak_memory: store.data().limiter.peak(),
        };
        drop(store);
        (run, meter)
    }
}

/// The task's capabilities: a live run reaches its storage (an empty in-memory store when
/// storage is granted and none was given), a replay serves its trace.
fn capabilities(
    req: &mut TaskRequest,
    applied: &LimitsApplied,
    seed: [u8; 32],
) -> TaskCapabilities {
    let mode = match req.replay.clone() {
        Some(trace) => Mode::Replay(trace),
        None => Mode::Live,
    };
    let storage = match (&mode, req.storage.take(), &req.grants.spec().storage) {
        (Mode::Live, None, Some(_)) => {
            Some(Box::new(MemoryBackend::new()) as Box<dyn StorageBackend>)
        }
        (_, storage, _) => storage,
    };
    let setup = TaskSetup {
        task: req.id.clone(),
        seed,
        start_unix_nanos: req.start_unix_nanos.unwrap_or_else(now_unix_nanos),
        storage,
        cancel: req.cancel.clone().unwrap_or_default(),
        delegation: req.delegation.clone(),
        memory_bytes: applied.memory_bytes,
        log_tap: req.log_tap.clone(),
        model_tap: req.model_tap.clone(),
        tool_tap: req.tool_tap.clone(),
        approver: req.approver.clone(),
        replay: matches!(mode, Mode::Replay(_)),
        tokens: applied.tokens.unwrap_or(0),
        history: std::mem::take(&mut req.history),
    };
    TaskCapabilities::new(&req.grants, setup, mode)
}

/// What the capabilities hold once the guest is gone (its children abandoned).
struct Leftovers {
    children: Vec<ChildSummary>,
    models: Vec<ModelCalls>,
    denials: Vec<String>,
    logs: Vec<String>,
    usage: CapUsage,
    replay_left: usize,
    trace: Trace,
    asked_for_input: bool,
}

impl Leftovers {
    fn take(caps: &mut TaskCapabilities) -> Self {
        let delegation = caps.get::<TaskDelegation>();
        delegation.abandon_pending();
        let children = delegation.children().to_vec();
        Self {
            children,
            models: caps.get::<ModelCapability>().usage(),
            denials: caps.denials().to_vec(),
            logs: caps.get::<LogCapability>().lines(),
            usage: caps.usage(),
            replay_left: caps.replay_remaining(),
            asked_for_input: caps.get::<ConversationCapability>().asked(),
            trace: caps.take_trace(),
        }
    }
}

/// How a run ended, from what the guest did and what happened around it (`None`: it
/// succeeded). In order: the guest's own failure or an output over `max_output_bytes`; a
/// denial, which names the run whatever else happened (`CapabilityDenied`); a cancel, which
/// ends it `Cancelled` whatever the guest did (it may have failed because its children were
/// cancelled, or returned before the check); a replay that left recorded events unconsumed.
fn ending(
    end: &GuestEnd,
    max_output_bytes: u64,
    denials: &[String],
    cancelled: bool,
    replay_left: usize,
) -> Option<Failure> {
    let mut failure = match end {
        GuestEnd::Failed(f) => Some(f.clone()),
        GuestEnd::Done(result) if result.output.len() as u64 > max_output_bytes => {
            Some(Failure::new(
                FailureKind::OutputTooLarge,
                format!(
                    "output is {} bytes, over the limit of {max_output_bytes} bytes",
                    result.output.len(),
                ),
            ))
        }
        GuestEnd::Done(_) => None,
    };
    let is = |f: &Option<Failure>, kind| f.as_ref().is_some_and(|f| f.kind == kind);
    if let Some(first) = denials.first()
        && !is(&failure, FailureKind::CapabilityDenied)
    {
        let then = failure
            .as_ref()
            .map(|f| format!(" (then: {f})"))
            .unwrap_or_default();
        failure = Some(Failure::new(
            FailureKind::CapabilityDenied,
            format!("capability denied: {first}{then}"),
        ));
    }
    if cancelled && !is(&failure, FailureKind::Cancelled) {
        let then = failure
            .as_ref()
            .map(|f| format!(" (the guest ended: {f})"))
            .unwrap_or_default();
        failure = Some(Failure::new(
            FailureKind::Cancelled,
            format!("the task was cancelled{then}"),
        ));
    }
    if replay_left > 0 && failure.is_none() {
        failure = Some(Failure::new(
            FailureKind::HostError,
            format!("replay diverged: {replay_left} recorded events were not consumed"),
        ));
    }
    failure
}

/// A refused storage commit as the run's failure, and whether it was a conflict (the runtime
/// then runs the task again).
fn commit_failure(err: CapError) -> (Failure, bool) {
    let conflict = matches!(err, CapError::Conflict(_));
    let failure = match err {
        CapError::Denied(msg) | CapError::QuotaExceeded(msg) => {
            Failure::new(FailureKind::CapabilityDenied, msg)
        }
        other => Failure::new(
            FailureKind::HostError,
            format!("storage commit failed: {other}"),
        ),
    };
    (failure, conflict)
}

/// Everything an outcome of this run says besides its ending, output, trace and logs: seals
/// (signs) outcomes, and commits the storage of one that succeeded.
struct Sealer<'a> {
    agent: &'a LoadedAgent,
    req: &'a TaskRequest,
    seed: [u8; 32],
    applied: LimitsApplied,
    resources: ResourcesUsed,
    estimate: Option<Estimate>,
    models: Vec<ModelCalls>,
    children: Vec<ChildSummary>,
    delegations_refused: u32,
    /// The guest called `ask-for-input`: a success ends `InputRequired`.
    asked_for_input: bool,
}

impl Sealer<'_> {
    /// The outcome, with its attestation signed.
    fn seal(
        &self,
        failure: Option<Failure>,
        output: Vec<u8>,
        trace: Trace,
        logs: Vec<String>,
    ) -> TaskOutcome {
        let req = self.req;
        let output_sha256 = sha256_hex(&output);
        let input_required = failure.is_none() && self.asked_for_input;
        let attestation = crate::attestation::sign_run(
            Claims {
                task: TaskIdentity {
                    namespace: req.namespace.clone().unwrap_or_default(),
                    name: req.id.clone(),
                    uid: req.uid.clone().unwrap_or_default(),
                },
                module_sha256: self.agent.module_sha256.clone(),
                input_sha256: sha256_hex(&req.input),
                config_sha256: sha256_hex(&req.config),
                requirements: req.requirements.clone(),
                seed: self.seed,
                limits_applied: self.applied.clone(),
                failure: failure.as_ref().map(|f| f.kind),
                output_sha256: output_sha256.clone(),
                resources_used: self.resources,
                models: self.models.clone(),
                children: self
                    .children
                    .iter()
                    .filter_map(ChildSummary::attested)
                    .collect(),
                approvals: crate::capability::approvals_of(&trace),
                input_required,
                conversation: req.conversation.clone(),
                trace_sha256: trace.sha256(),
                executor: req.executor.clone(),
            },
            &req.attestation_key,
        );
        TaskOutcome {
            task_id: req.id.clone(),
            output,
            output_sha256,
            resources_used: self.resources,
            limits_applied: self.applied.clone(),
            models: self.models.clone(),
            attestation,
            failure,
            estimate: self.estimate,
            trace,
            logs,
            children: self.children.clone(),
            delegations_refused: self.delegations_refused,
            input_required,
            output_not_kept: false,
            storage_conflict: false,
        }
    }

    /// Commits the storage writes of the successful `outcome`, with its receipt. A commit the
    /// gate refuses, or that fails, turns it into a failed outcome that keeps nothing.
    fn commit(
        &self,
        mut caps: MutexGuard<'_, TaskCapabilities>,
        outcome: TaskOutcome,
    ) -> TaskOutcome {
        if let Some(gate) = &self.req.commit_gate
            && let Err(why) = gate()
        {
            drop(caps);
            let failure = Failure::new(
                FailureKind::HostError,
                format!("storage not committed: {why}"),
            );
            return self.seal(Some(failure), Vec::new(), outcome.trace, outcome.logs);
        }
        let receipt = self
            .req
            .receipt
            .as_ref()
            .map(|id| (id.clone(), outcome.receipt_bytes()));
        let commit = caps.call(|s: &mut TaskStorage, rec| s.commit(rec.is_replay(), receipt));
        drop(caps);
        let Err(err) = commit else {
            return outcome;
        };
        let (failure, storage_conflict) = commit_failure(err);
        TaskOutcome {
            storage_conflict,
            ..self.seal(Some(failure), Vec::new(), outcome.trace, outcome.logs)
        }
    }
}

/// Read off the store before it is dropped.
#[derive(Default)]
struct StoreMeter {
    fuel: u64,
    peak_memory: u64,
}

fn call_guest(
    pre: &crate::bindings::AriAgentPre<TaskState>,
    store: &mut Store<TaskState>,
    spec: &TaskSpec,
    config: &[u8],
) -> GuestRun {
    let mut estimate = None;
    let end = call_exports(pre, store, spec, config, &mut estimate);
    GuestRun { end, estimate }
}

fn call_exports(
    pre: &crate::bindings::AriAgentPre<TaskState>,
    store: &mut Store<TaskState>,
    spec: &TaskSpec,
    config: &[u8],
    estimate: &mut Option<Estimate>,
) -> GuestEnd {
    let classify = |store: &Store<TaskState>, e: wasmtime::Error| {
        GuestEnd::Failed(classify_call_error(&e, store.data().limiter.limit_hit()))
    };
    let agent = match pre.instantiate(&mut *store) {
        Ok(a) => a,
        Err(e)
            if e.downcast_ref::<wasmtime::Trap>().is_some()
                || store.data().limiter.limit_hit().is_some() =>
        {
            return classify(store, e);
        }
        Err(e) => {
            return GuestEnd::Failed(Failure::new(
                FailureKind::HostError,
                format!("cannot instantiate: {}", error_chain(&e)),
            ));
        }
    };
    let guest = agent.ainur_ari_agent();
    match guest.call_initialize(&mut *store, config) {
        Ok(Ok(())) => {}
        Ok(Err(code)) => return guest_error(store, "initialize", code),
        Err(e) => return classify(store, e),
    }
    match guest.call_can_execute(&mut *store, spec) {
        Ok(true) => {}
        Ok(false) => {
            return GuestEnd::Failed(Failure::new(
                FailureKind::AgentError,
                "the agent declined the task (can-execute returned false)",
            ));
        }
        Err(e) => return classify(store, e),
    }
    // An agent that cannot estimate is not a failed task: the estimate is only recorded.
    match guest.call_estimate(&mut *store, spec) {
        Ok(Ok(e)) => {
            *estimate = Some(Estimate {
                fuel: e.fuel,
                duration_millis: e.duration_millis,
                memory_bytes: e.memory_bytes,
            });
        }
        Ok(Err(_)) => {}
        Err(e) => return classify(store, e),
    }
    match guest.call_execute(&mut *store, spec) {
        Ok(Ok(result)) => GuestEnd::Done(result),
        Ok(Err(code)) => guest_error(store, "execute", code),
        Err(e) => classify(store, e),
    }
}

/// The guest returned an `error-code`: a host failure it passed on is `HostError`, a
/// capability it says it was refused is `CapabilityDenied`, anything else `AgentError`.
fn guest_error(store: &Store<TaskState>, call: &str, code: ErrorCode) -> GuestEnd {
    let (kind, name, msg) = match code {
        ErrorCode::Denied(m) => (FailureKind::CapabilityDenied, "denied", m),
        ErrorCode::InvalidInput(m) => (FailureKind::AgentError, "invalid-input", m),
        ErrorCode::Unsupported(m) => (FailureKind::AgentError, "unsupported", m),
        ErrorCode::Failed(m) => (FailureKind::AgentError, "failed", m),
    };
    let failure = match store.data().host_failures.first() {
        Some(host) => Failure::new(
            FailureKind::HostError,
            format!("{call} returned {name}: {msg} (after host failure: {host})"),
        ),
        None => Failure::new(kind, format!("{call} returned {name}: {msg}")),
    };
    GuestEnd::Failed(failure)
}

/// Checks that need no instance: cancellation, input size and requirements.
fn precheck(req: &TaskRequest, applied: &LimitsApplied) -> Option<Failure> {
    if req.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
        return Some(Failure::new(
            FailureKind::Cancelled,
            "the task was cancelled before it started",
        ));
    }
    if req.input.len() as u64 > applied.max_input_bytes {
        return Some(Failure::new(
            FailureKind::HostError,
            format!(
                "input is {} bytes, over the limit of {} bytes",
                req.input.len(),
                applied.max_input_bytes
            ),
        ));
    }
    let missing: Vec<&str> = req
        .requirements
        .iter()
        .filter(|r| !req.grants.grants(**r))
        .map(|r| r.as_str())
        .collect();
    if !missing.is_empty() {
        return Some(Failure::new(
            FailureKind::CapabilityDenied,
            format!(
                "task requires {} but the agent is granted only [{}]",
                missing.join(", "),
                req.grants
                    .names()
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    None
}

/// A fresh task seed from the thread's CSPRNG (rand's `ThreadRng`: ChaCha12 seeded and
/// reseeded from the OS, the generator wasmtime-wasi already draws from for every WASI
/// context), not a `getrandom` syscall per task.
fn random_seed() -> [u8; 32] {
    rand::random()
}

fn now_unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

mod b64 {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(output_bytes: usize) -> GuestEnd {
        GuestEnd::Done(ExecutionResult {
            output: vec![b'x'; output_bytes],
            resources_used: crate::bindings::ResourceUsage {
                cpu_millis: 0,
                memory_bytes: 0,
                storage_bytes: 0,
                network_bytes: 0,
            },
            attestation: None,
        })
    }

    /// (guest end, denials, cancelled, replay events left) -> kind and message
    type Case<'a> = (
        GuestEnd,
        &'a [String],
        bool,
        usize,
        Option<(FailureKind, &'a str)>,
    );

    #[test]
    fn a_run_ends_by_the_first_rule_that_applies() {
        use FailureKind::*;
        let agent_error = || GuestEnd::Failed(Failure::new(AgentError, "boom"));
        let denied = ["capability `network` not granted".to_owned()];
        let table: Vec<Case> = vec![
            (done(4), &[], false, 0, None),
            (
                done(5),
                &[],
                false,
                0,
                Some((
                    OutputTooLarge,
                    "output is 5 bytes, over the limit of 4 bytes",
                )),
            ),
            (
                agent_error(),
                &denied,
                false,
                0,
                Some((
                    CapabilityDenied,
                    "capability denied: capability `network` not granted (then: AgentError: boom)",
                )),
            ),
            (
                done(4),
                &denied,
                true,
                0,
                Some((
                    Cancelled,
                    "the task was cancelled (the guest ended: CapabilityDenied: capability \
                     denied: capability `network` not granted)",
                )),
            ),
            (
                done(4),
                &[],
                true,
                0,
                Some((Cancelled, "the task was cancelled")),
            ),
            (
                done(4),
                &[],
                false,
                2,
                Some((
                    HostError,
                    "replay diverged: 2 recorded events were not consumed",
                )),
            ),
            // A replay that failed anyway keeps its own ending.
            (agent_error(), &[], false, 2, Some((AgentError, "boom"))),
        ];
        for (end, denials, cancelled, left, want) in table {
            let got = ending(&end, 4, denials, cancelled, left);
            assert_eq!(
                got.as_ref().map(|f| (f.kind, f.message.as_str())),
                want,
                "{denials:?} cancelled={cancelled} left={left}"
            );
        }
    }

    #[test]
    fn a_refused_commit_is_a_denial_a_conflict_runs_again_anything_else_is_the_hosts() {
        let table = [
            (
                CapError::QuotaExceeded("full".into()),
                FailureKind::CapabilityDenied,
                false,
            ),
            (CapError::Conflict("k".into()), FailureKind::HostError, true),
            (CapError::Failed("io".into()), FailureKind::HostError, false),
        ];
        for (err, kind, conflict) in table {
            let (failure, again) = commit_failure(err);
            assert_eq!((failure.kind, again), (kind, conflict), "{failure}");
        }
    }

    #[test]
    fn conflict_backoff_is_random_and_capped_at_64_ms() {
        for attempt in 1..MAX_STORAGE_RUNS {
            let cap = Duration::from_millis(1 << attempt.min(6));
            assert!(conflict_backoff(attempt) <= cap, "attempt {attempt}");
        }
        let spread: std::collections::HashSet<Duration> =
            (0..32).map(|_| conflict_backoff(6)).collect();
        assert!(spread.len() > 1, "the pause is not random");
    }
}
