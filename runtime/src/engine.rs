//! The one Wasmtime [`Engine`] of the process and the thread that drives its epoch.
//!
//! Everything that shapes compiled code lives here (fuel, epochs, determinism switches), so the
//! engine fingerprint that keys the artifact cache changes whenever any of it does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
};

/// How often the epoch advances; a task's deadline is rounded up to a whole number of ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Which instance allocator the engine ended up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AllocatorKind {
    /// Pre-reserved slots: instantiation is a few µs, memory is reused between tasks.
    Pooling,
    /// `mmap` per instance: slower, but needs no up-front address space (small nodes, tight ulimits).
    OnDemand,
}

/// Which allocator to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllocatorChoice {
    /// Pooling, falling back to on-demand when the pool cannot be reserved.
    #[default]
    Auto,
    Pooling,
    OnDemand,
}

/// Per-component ceilings, the same under both allocators (the pool checks them when a
/// component is loaded, the store's limiter when it is instantiated): a Rust wasip2 agent uses
/// one memory, a few tables and a handful of core instances, far inside these.
pub const MAX_CORE_INSTANCES_PER_COMPONENT: u32 = 32;
pub const MAX_MEMORIES_PER_COMPONENT: u32 = 2;
pub const MAX_TABLES_PER_COMPONENT: u32 = 8;

/// Sizing of the pooling allocator.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Component instances that can be alive at once: the worker sets its task concurrency
    /// (see [`PoolConfig::for_concurrency`]).
    pub slots: u32,
    /// Largest linear memory any instance may reach; task memory limits are clamped to it.
    pub max_memory_bytes: u64,
    /// Bytes of each memory slot kept mapped between tasks, so reuse needs no page faults.
    pub keep_resident_bytes: usize,
}

impl PoolConfig {
    /// A pool with one slot per concurrently running task.
    pub fn for_concurrency(concurrency: usize) -> Self {
        Self {
            slots: u32::try_from(concurrency.max(1)).unwrap_or(u32::MAX),
            ..Self::default()
        }
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            slots: 64,
            max_memory_bytes: 1 << 30,
            keep_resident_bytes: 1 << 20,
        }
    }
}

/// Engine-wide switches. `consume_fuel`, `epoch_interruption` and `cranelift_opt_level` exist
/// only so the benchmark can measure what each costs: with fuel off no fuel limit holds, with
/// epochs off no deadline or cancel fires. The product keeps the defaults.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub allocator: AllocatorChoice,
    pub pool: PoolConfig,
    pub consume_fuel: bool,
    pub epoch_interruption: bool,
    pub cranelift_opt_level: OptLevel,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            allocator: AllocatorChoice::Auto,
            pool: PoolConfig::default(),
            consume_fuel: true,
            epoch_interruption: true,
            cranelift_opt_level: OptLevel::Speed,
        }
    }
}

/// Builds the engine, trying the pooling allocator first when asked to.
pub fn build_engine(opts: &EngineOptions) -> wasmtime::Result<(Engine, AllocatorKind)> {
    match opts.allocator {
        AllocatorChoice::OnDemand => {
            Ok((Engine::new(&base_config(opts))?, AllocatorKind::OnDemand))
        }
        AllocatorChoice::Pooling => Ok((pooling_engine(opts)?, AllocatorKind::Pooling)),
        AllocatorChoice::Auto => match pooling_engine(opts) {
            Ok(engine) => {
                tracing::info!(
                    slots = opts.pool.slots,
                    "wasmtime engine: pooling allocator"
                );
                Ok((engine, AllocatorKind::Pooling))
            }
            Err(err) => {
                tracing::warn!(error = %err, "pooling allocator unavailable; using on-demand allocation");
                Ok((Engine::new(&base_config(opts))?, AllocatorKind::OnDemand))
            }
        },
    }
}

fn base_config(opts: &EngineOptions) -> Config {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .consume_fuel(opts.consume_fuel)
        .epoch_interruption(opts.epoch_interruption)
        .cranelift_opt_level(opts.cranelift_opt_level)
        // Attestations promise re-execution to the same digest on any machine: make floats and
        // relaxed SIMD bit-for-bit deterministic.
        .cranelift_nan_canonicalization(true)
        .relaxed_simd_deterministic(true)
        // Agents are wasip2 components with synchronous exports and the host links no async
        // functions: without the component-model-async machinery a store is cheaper to create
        // and each export call skips its task bookkeeping.
        .concurrency_support(false)
        // Tasks run on the caller's thread; keep guest stack use well under a 2 MiB thread stack.
        .max_wasm_stack(512 * 1024);
    config
}

fn pooling_engine(opts: &EngineOptions) -> wasmtime::Result<Engine> {
    let slots = opts.pool.slots.max(1);
    let mut pool = PoolingAllocationConfig::new();
    // Totals let every slot hold a component at the per-component ceilings, so a full pool
    // never fails for want of memories or tables while a component slot is free.
    pool.total_component_instances(slots)
        .total_core_instances(slots.saturating_mul(MAX_CORE_INSTANCES_PER_COMPONENT))
        .total_memories(slots.saturating_mul(MAX_MEMORIES_PER_COMPONENT))
        .total_tables(slots.saturating_mul(MAX_TABLES_PER_COMPONENT))
        .max_core_instances_per_component(MAX_CORE_INSTANCES_PER_COMPONENT)
        .max_memories_per_component(MAX_MEMORIES_PER_COMPONENT)
        .max_tables_per_component(MAX_TABLES_PER_COMPONENT)
        .max_memory_size(usize::try_from(opts.pool.max_memory_bytes).unwrap_or(usize::MAX))
        .linear_memory_keep_resident(opts.pool.keep_resident_bytes)
        .table_keep_resident(64 * 1024)
        // Reset only the pages a task dirtied (Linux 6.7+ `PAGEMAP_SCAN`), not all of
        // `keep_resident_bytes`: an `echo` task touches a few pages, and the memset of the
        // whole first MiB of its slot was a quarter of its time. Off where unsupported.
        .pagemap_scan(Enabled::Auto)
        .max_unused_warm_slots(slots);
    let mut config = base_config(opts);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config)
}

/// Advances the engine epoch every [`EPOCH_TICK`] until dropped, so epoch deadlines fire.
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(engine: Engine) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("ari-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// Epoch ticks covering `timeout` (rounded up, plus one so a deadline never fires early).
pub fn deadline_ticks(timeout: Duration) -> u64 {
    let tick = EPOCH_TICK.as_nanos();
    let ticks = timeout.as_nanos().div_ceil(tick) + 1;
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_ticks_round_up() {
        assert_eq!(deadline_ticks(Duration::from_millis(10)), 2);
        assert_eq!(deadline_ticks(Duration::from_millis(11)), 3);
        assert_eq!(deadline_ticks(Duration::from_secs(1)), 101);
    }

    #[test]
    fn the_pool_has_a_slot_per_concurrent_task() {
        assert_eq!(PoolConfig::for_concurrency(1024).slots, 1024);
        assert_eq!(PoolConfig::for_concurrency(0).slots, 1);
        let opts = EngineOptions {
            allocator: AllocatorChoice::Auto,
            pool: PoolConfig::for_concurrency(1024),
            ..Default::default()
        };
        // Pooling when the address space allows, else the on-demand fallback: never an error.
        assert!(build_engine(&opts).is_ok());
    }

    #[test]
    fn on_demand_engine_builds() {
        let opts = EngineOptions {
            allocator: AllocatorChoice::OnDemand,
            ..Default::default()
        };
        let (_, kind) = build_engine(&opts).expect("engine");
        assert_eq!(kind, AllocatorKind::OnDemand);
    }
}
