//! What a task's `Store` holds.

use std::sync::{Arc, Mutex, MutexGuard};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::capability::TaskCapabilities;
use crate::limits::MemoryLimiter;

/// The task's capability state, shared with the WASI clock/random/stdio adapters (which cannot
/// reach the `Store`). Only one thread ever touches it, so the lock is never contended.
pub(crate) type SharedCaps = Arc<Mutex<TaskCapabilities>>;

/// Locks the capability state; a panic elsewhere while it was held does not poison the task.
pub(crate) fn lock(caps: &SharedCaps) -> MutexGuard<'_, TaskCapabilities> {
    caps.lock().unwrap_or_else(|e| e.into_inner())
}

/// The data of a task's `Store`: one per task, dropped with it.
pub(crate) struct TaskState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub caps: SharedCaps,
    pub limiter: MemoryLimiter,
    /// Messages of granted host calls that failed (returned to the guest as `err`); the first
    /// `MAX_NOTED` only.
    pub host_failures: Vec<String>,
    /// Fuel charged by host calls (part of the fuel consumed).
    pub host_fuel: u64,
}

impl TaskState {
    pub fn caps(&self) -> MutexGuard<'_, TaskCapabilities> {
        lock(&self.caps)
    }
}

impl WasiView for TaskState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
