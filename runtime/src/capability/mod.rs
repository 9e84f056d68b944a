//! The capability layer: everything a guest can reach outside its sandbox.
//!
//! Deny by default. Each capability is its own module owning all of itself
//! (like Spin's factors): its checks, metering and recording, its trace events
//! and their replay, and in its `link` module its host functions' linkage,
//! their fuel costs and how its errors reach the guest. [`TaskCapabilities`]
//! only composes them for one task and keeps the cross-cutting bits: the trace
//! recorder, the list of denials and the usage summary; `crate::host` gathers
//! the `link` modules. Only the `link` modules know about Wasmtime.

pub mod clock;
pub mod crypto;
pub mod delegation;
mod error;
mod grants;
pub mod http;
pub mod log;
pub mod random;
pub mod storage;

pub use crypto::{HashAlgorithm, LoadedSigningKey};
pub use delegation::{DelegationContext, DelegationFailure, DelegationGrant, Settled};
pub use error::{CapError, GrantError};
pub use grants::{Grants, parse_cli_name, parse_size};
pub use http::{HttpLimits, HttpRequest, HttpResponse, allowlist};
pub use log::{LogLevel, LogTap};
pub use storage::StorageGrant;

use crate::trace::{Recorder, Trace};

/// How many denials (and, in the executor, host failures) a task keeps for its failure message.
pub const MAX_NOTED: usize = 16;

/// Live runs talk to storage and the network and record; replays serve the trace.
#[derive(Debug, Clone)]
pub enum Mode {
    Live,
    Replay(Trace),
}

/// What the capabilities measured for one task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapUsage {
    /// Key + value bytes of every accepted `storage-set` (committed or not).
    pub storage_bytes_written: u64,
    /// HTTP bytes both ways, every hop (see `http::request_bytes`).
    pub network_bytes: u64,
    /// Log message bytes kept.
    pub log_bytes: u64,
    /// Fuel the task's children took out of its budget.
    pub children_fuel: u64,
    /// Delegation calls refused by the grant or its limits.
    pub delegations_refused: u32,
}

/// All capabilities of one task. Create one per task; never share between tasks.
pub struct TaskCapabilities {
    log: log::LogCapability,
    storage: storage::TaskStorage,
    random: random::RandomCapability,
    crypto: crypto::CryptoCapability,
    http: http::HttpCapability,
    clock: clock::ClockCapability,
    delegation: delegation::TaskDelegation,
    recorder: Recorder,
    denials: Vec<String>,
}

impl TaskCapabilities {
    /// `storage` is the agent's backend (may be `None` in replay, or when not granted).
    pub fn new(
        grants: &Grants,
        storage: Option<Box<dyn storage::StorageBackend>>,
        seed: [u8; 32],
        start_unix_nanos: u64,
        mode: Mode,
    ) -> Self {
        use ari_model::CapabilityName::{Randomness, TimeAccess};
        let recorder = match mode {
            Mode::Live => Recorder::live(),
            Mode::Replay(trace) => Recorder::replay(trace),
        };
        Self {
            log: log::LogCapability::default(),
            storage: storage::TaskStorage::new(grants.spec().storage, storage),
            random: random::RandomCapability::new(grants.grants(Randomness), seed),
            crypto: crypto::CryptoCapability::new(grants.key().cloned()),
            http: http::HttpCapability::new(grants.hosts().cloned(), HttpLimits::default()),
            clock: clock::ClockCapability::new(grants.grants(TimeAccess), start_unix_nanos),
            delegation: delegation::TaskDelegation::new(grants.spec().delegation.clone()),
            recorder,
            denials: Vec::new(),
        }
    }

    /// Hands every kept guest log line to `tap` as it is written (see [`log::LogTap`]).
    pub fn set_log_tap(&mut self, tap: log::LogTap) {
        self.log.set_tap(tap);
    }

    /// Overrides the default HTTP ceilings (4 MiB body, 30 s, 5 redirects).
    pub fn set_http_limits(&mut self, limits: HttpLimits) {
        self.http.set_limits(limits);
    }

    /// The task's deadline: host calls that block (HTTP) never wait past it, and children
    /// never get more time than is left.
    pub fn set_deadline(&mut self, deadline: std::time::Instant) {
        self.http.set_deadline(deadline);
        self.delegation.set_deadline(deadline);
    }

    /// The task's cancel token: host calls that block on the outside world (HTTP) return as
    /// soon as it fires (see [`crate::cancel::run_cancellable`]).
    pub fn set_cancel(&mut self, cancel: crate::cancel::CancelToken) {
        self.http.set_cancel(cancel);
    }

    /// What runs this task's children, and what they inherit (see
    /// [`delegation::TaskDelegation::set_context`]).
    pub fn set_delegation(
        &mut self,
        context: Option<DelegationContext>,
        task: &str,
        cancel: crate::cancel::CancelToken,
        memory_bytes: u64,
    ) {
        self.delegation
            .set_context(context, task, cancel, memory_bytes);
    }

    /// Notes a denial so the executor can classify the task as `CapabilityDenied`. Only the
    /// first [`MAX_NOTED`] are kept: a guest looping on a refused call must not grow host memory.
    fn note<T>(&mut self, result: Result<T, CapError>) -> Result<T, CapError> {
        if let Some(reason) = result.as_ref().err().and_then(CapError::denial_reason)
            && self.denials.len() < MAX_NOTED
        {
            self.denials.push(reason.to_owned());
        }
        result
    }

    pub fn log(&mut self, level: LogLevel, msg: &str) {
        self.log.log(level, msg);
    }

    /// Log lines kept so far, as `LEVEL message`, plus a truncation marker if any were dropped.
    pub fn logs(&self) -> Vec<String> {
        self.log.lines()
    }

    pub fn storage_get(&mut self, key: &str) -> Result<Option<Vec<u8>>, CapError> {
        let r = self.storage.get(key, &mut self.recorder);
        self.note(r)
    }

    pub fn storage_set(&mut self, key: &str, value: &[u8]) -> Result<(), CapError> {
        let r = self.storage.set(key, value, &mut self.recorder);
        self.note(r)
    }

    pub fn storage_delete(&mut self, key: &str) -> Result<(), CapError> {
        let r = self.storage.delete(key, &mut self.recorder);
        self.note(r)
    }

    pub fn random_bytes(&mut self, len: u32) -> Result<Vec<u8>, CapError> {
        let r = self.random.random_bytes(len, &mut self.recorder);
        self.note(r)
    }

    /// WASI `random_get`: always allowed, seeded, separate from `random-bytes`.
    pub fn fill_wasi_random(&mut self, buf: &mut [u8]) {
        self.random.fill_wasi(buf);
    }

    pub fn hash(&mut self, algorithm: HashAlgorithm, data: &[u8]) -> Vec<u8> {
        self.crypto.hash(algorithm, data)
    }

    pub fn sign(&mut self, data: &[u8]) -> Result<Vec<u8>, CapError> {
        let r = self.crypto.sign(data);
        self.note(r)
    }

    pub fn verify(&mut self, pk: &[u8], data: &[u8], sig: &[u8]) -> bool {
        self.crypto.verify(pk, data, sig)
    }

    pub fn http_request(&mut self, req: HttpRequest) -> Result<HttpResponse, CapError> {
        let r = self.http.request(req, &mut self.recorder);
        self.note(r)
    }

    pub fn now(&mut self) -> Result<u64, CapError> {
        let r = self.clock.now(&mut self.recorder);
        self.note(r)
    }

    /// Checks a delegation against the grant and its limits; a refusal is a denial.
    pub fn delegation_check(&mut self, agent: &str) -> Result<(), DelegationFailure> {
        let r = self.delegation.check(agent);
        if let Err(DelegationFailure::Denied(why)) = &r {
            let _ = self.note::<()>(Err(CapError::Denied(why.clone())));
        }
        r
    }

    /// Time left to fund a child with (`None`: no deadline set).
    pub fn delegation_time_left(&self) -> Option<std::time::Duration> {
        self.delegation.time_left()
    }

    pub fn delegation_start(
        &mut self,
        agent: &str,
        input: &[u8],
        fuel: u64,
        timeout: std::time::Duration,
        message: bool,
    ) -> Result<u32, DelegationFailure> {
        self.delegation
            .start(agent, input, fuel, timeout, message, &mut self.recorder)
    }

    #[allow(clippy::type_complexity)]
    pub fn delegation_await(
        &mut self,
        child: u32,
    ) -> Result<(Result<Vec<u8>, delegation::ChildFailure>, Settled), DelegationFailure> {
        self.delegation.await_child(child, &mut self.recorder)
    }

    /// The children this task started and how each ended.
    pub fn children(&self) -> &[delegation::ChildSummary] {
        self.delegation.children()
    }

    /// Cancels the children this task started and never awaited.
    pub fn abandon_children(&mut self) {
        self.delegation.abandon_pending();
    }

    /// WASI wall and monotonic clocks: the logical clock with `timeAccess`, else 0.
    /// A replay that diverges here also yields 0; the divergence shows in the trace digest.
    pub fn wasi_now_nanos(&mut self) -> u64 {
        self.clock.wasi_now(&mut self.recorder).unwrap_or(0)
    }

    /// The first denials, in order (capability missing, host not allowed, quota); at most
    /// [`MAX_NOTED`].
    pub fn denials(&self) -> &[String] {
        &self.denials
    }

    pub fn usage(&self) -> CapUsage {
        CapUsage {
            storage_bytes_written: self.storage.bytes_written(),
            network_bytes: self.http.bytes(),
            log_bytes: self.log.bytes(),
            children_fuel: self.delegation.children_fuel(),
            delegations_refused: self.delegation.refused(),
        }
    }

    /// Commits the storage transaction, with `receipt` (see `storage::Batch::receipt`); call
    /// only when the task succeeded. A replay commits nothing. A quota overrun by concurrent
    /// tasks is `QuotaExceeded`.
    pub fn commit(&mut self, receipt: Option<(String, Vec<u8>)>) -> Result<(), CapError> {
        let r = self.storage.commit(self.recorder.is_replay(), receipt);
        self.note(r)
    }

    /// Whether the trace hit its ceiling (the host then traps the guest).
    pub fn trace_overflowed(&self) -> bool {
        self.recorder.overflowed()
    }

    /// Recorded events not consumed by a replay (0 when faithful, or live).
    pub fn replay_remaining(&self) -> usize {
        self.recorder.remaining()
    }

    /// The trace recorded so far (in replay: the events consumed).
    pub fn take_trace(&mut self) -> Trace {
        self.recorder.take()
    }

    /// Public key of the granted signing key, for attestations that mention it.
    pub fn signing_public_key(&self) -> Option<[u8; 32]> {
        self.crypto.public_key()
    }
}

#[cfg(test)]
mod tests;
