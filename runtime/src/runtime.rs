//! The runtime (one engine, one linker, the artifact cache) and loaded agents.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

use crate::attestation::sha256_hex;
use crate::bindings::AriAgentPre;
use crate::cache::{ArtifactCache, LoadSource};
use crate::engine::{AllocatorKind, EngineOptions, EpochTicker, build_engine};
use crate::failure::FailureKind;
use crate::state::TaskState;
use crate::{host, validate, wasi};

/// How to build a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where precompiled artifacts are cached; `None` disables the disk cache.
    /// Default: [`ArtifactCache::default_dir`].
    pub cache_dir: Option<PathBuf>,
    pub engine: EngineOptions,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: ArtifactCache::default_dir(),
            engine: EngineOptions::default(),
        }
    }
}

/// Why the runtime could not start or load a module.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The bytes are not a usable agent component (maps to `InvalidModule`).
    #[error("invalid module: {0}")]
    InvalidModule(String),
    /// The engine could not be built.
    #[error("cannot start the Wasm engine: {0}")]
    Engine(String),
}

impl RuntimeError {
    /// The task failure class this error means.
    pub fn kind(&self) -> FailureKind {
        match self {
            RuntimeError::InvalidModule(_) => FailureKind::InvalidModule,
            RuntimeError::Engine(_) => FailureKind::HostError,
        }
    }
}

/// Counters that show what loading cost (a test proves a cached load does not compile).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Components compiled by this runtime.
    pub compiles: u64,
    /// Components loaded from precompiled artifacts.
    pub cache_hits: u64,
}

/// One per process: the engine, the linker with WASI and the host interface, the cache.
/// Cheap to clone; agents keep it (and its epoch thread) alive.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub engine: Engine,
    pub allocator: AllocatorKind,
    pub linker: Linker<TaskState>,
    pub cache: ArtifactCache,
    pub consume_fuel: bool,
    /// Ceiling of any one task's memory (the pool's slot size), when pooling.
    pub max_memory_bytes: Option<u64>,
    compiles: AtomicU64,
    cache_hits: AtomicU64,
    _ticker: EpochTicker,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        let (engine, allocator) =
            build_engine(&config.engine).map_err(|e| RuntimeError::Engine(error_chain(&e)))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .and_then(|()| wasi::virtualise_sleep(&mut linker))
            .and_then(|()| wasi::meter_clocks(&mut linker))
            .and_then(|()| host::add_to_linker(&mut linker))
            .map_err(|e| RuntimeError::Engine(error_chain(&e)))?;
        let ticker = EpochTicker::start(engine.clone())
            .map_err(|e| RuntimeError::Engine(format!("cannot start the epoch thread: {e}")))?;
        let cache = ArtifactCache::new(&engine, config.cache_dir);
        Ok(Runtime {
            inner: Arc::new(Inner {
                max_memory_bytes: (allocator == AllocatorKind::Pooling)
                    .then_some(config.engine.pool.max_memory_bytes),
                engine,
                allocator,
                linker,
                cache,
                consume_fuel: config.engine.consume_fuel,
                compiles: AtomicU64::new(0),
                cache_hits: AtomicU64::new(0),
                _ticker: ticker,
            }),
        })
    }

    /// Validates, compiles (or loads from the cache) and links an agent component.
    pub fn load(&self, bytes: &[u8]) -> Result<LoadedAgent, RuntimeError> {
        validate::check_header(bytes).map_err(RuntimeError::InvalidModule)?;
        let digest = sha256_hex(bytes);
        let inner = &self.inner;
        let (component, source) = inner
            .cache
            .load(&inner.engine, bytes, &digest)
            .map_err(|e| {
                RuntimeError::InvalidModule(format!(
                    "component does not compile: {}",
                    error_chain(&e)
                ))
            })?;
        match source {
            LoadSource::Compiled => inner.compiles.fetch_add(1, Ordering::Relaxed),
            LoadSource::Cache => inner.cache_hits.fetch_add(1, Ordering::Relaxed),
        };
        validate::check_exports(&inner.engine, &component).map_err(RuntimeError::InvalidModule)?;
        let pre = inner.linker.instantiate_pre(&component).map_err(|e| {
            RuntimeError::InvalidModule(format!(
                "component needs imports the executor does not provide: {}",
                error_chain(&e)
            ))
        })?;
        let pre = AriAgentPre::new(pre).map_err(|e| {
            RuntimeError::InvalidModule(format!(
                "the ainur:ari/agent export does not match the contract: {}",
                error_chain(&e)
            ))
        })?;
        Ok(LoadedAgent {
            runtime: self.clone(),
            pre,
            component,
            module_sha256: digest,
            source,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Which allocator the engine got (pooling, or on-demand after a fallback).
    pub fn allocator(&self) -> AllocatorKind {
        self.inner.allocator
    }

    pub fn stats(&self) -> RuntimeStats {
        RuntimeStats {
            compiles: self.inner.compiles.load(Ordering::Relaxed),
            cache_hits: self.inner.cache_hits.load(Ordering::Relaxed),
        }
    }

    /// The engine fingerprint that keys the artifact cache (hex).
    pub fn engine_fingerprint(&self) -> &str {
        self.inner.cache.fingerprint()
    }
}

/// An agent component loaded into the runtime: the compiled component and its pre-linked
/// instance template. Not the `Agent` resource (`ari_crds::Agent`, what a user applies) nor the
/// guest trait (`ari_sdk::Agent`, what an author implements). Cheap to clone and `Send + Sync`,
/// so a worker can run tasks of one agent on many threads at once.
#[derive(Clone)]
pub struct LoadedAgent {
    pub(crate) runtime: Runtime,
    pub(crate) pre: AriAgentPre<TaskState>,
    pub(crate) component: Component,
    pub(crate) module_sha256: String,
    pub(crate) source: LoadSource,
}

impl LoadedAgent {
    /// Hex SHA-256 of the component bytes (recorded in every attestation).
    pub fn module_sha256(&self) -> &str {
        &self.module_sha256
    }

    /// Whether this load compiled or came from the artifact cache.
    pub fn load_source(&self) -> LoadSource {
        self.source
    }

    pub fn component(&self) -> &Component {
        &self.component
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }
}

/// `a: b: c` from an error and its causes.
pub(crate) fn error_chain(err: &wasmtime::Error) -> String {
    err.chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + Clone>() {}

    #[test]
    fn runtime_and_agent_can_be_shared_between_worker_threads() {
        assert_send_sync::<Runtime>();
        assert_send_sync::<LoadedAgent>();
    }
}
