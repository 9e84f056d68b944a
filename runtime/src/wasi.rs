//! Virtualised WASI for one task: nothing of the host leaks in.
//!
//! No preopens, environment, arguments or sockets; stdin is empty; stdout and stderr are
//! forwarded line by line to the task log (bounded); wall and monotonic clocks read the task's
//! logical clock when `timeAccess` is granted and stand still at the Unix epoch otherwise; secure and
//! insecure random come from the task's seeded PRNG. Everything is thus a function of the task's
//! seed and trace, which is what makes replay exact.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder};

use crate::capability::clock::ClockCapability;
use crate::capability::log::LogCapability;
use crate::capability::random::RandomCapability;
use crate::capability::{LogLevel, TaskCapabilities};
use crate::state::{SharedCaps, lock};

/// Longest line forwarded to the log; longer lines are cut (and marked) to bound host memory.
const MAX_LINE_BYTES: usize = 8 * 1024;

/// Builds the WASI context of a task around its shared capability state.
pub(crate) fn build_ctx(caps: &SharedCaps, time_granted: bool, seed: &[u8; 32]) -> WasiCtx {
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdout(LogPipe::new(caps.clone(), LogLevel::Info))
        .stderr(LogPipe::new(caps.clone(), LogLevel::Warn))
        .secure_random(TaskRng(caps.clone()))
        .insecure_random(TaskRng(caps.clone()))
        .insecure_random_seed(insecure_seed(seed))
        .allow_ip_name_lookup(false)
        .allow_tcp(false)
        .allow_udp(false);
    if time_granted {
        builder
            .wall_clock(LogicalClock(caps.clone()))
            .monotonic_clock(LogicalClock(caps.clone()));
    } else {
        builder
            .wall_clock(StoppedClock)
            .monotonic_clock(StoppedClock);
    }
    builder.build()
}

/// `wasi:random/insecure-seed`, derived from the task seed (domain-separated).
fn insecure_seed(seed: &[u8; 32]) -> u128 {
    let digest = Sha256::new()
        .chain_update(b"ari/wasi-insecure-seed/v1")
        .chain_update(seed)
        .finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_le_bytes(first)
}

/// The task's logical clock (capability `timeAccess`): the same values the `now` host call returns.
struct LogicalClock(SharedCaps);

impl LogicalClock {
    fn nanos(&self) -> u64 {
        wasi_now(&mut lock(&self.0))
    }
}

impl HostWallClock for LogicalClock {
    fn resolution(&self) -> Duration {
        Duration::from_micros(1)
    }
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos())
    }
}

impl HostMonotonicClock for LogicalClock {
    fn resolution(&self) -> u64 {
        1_000
    }
    fn now(&self) -> u64 {
        self.nanos()
    }
}

/// Without `timeAccess`, every clock reads the Unix epoch, so no real time reaches the guest.
struct StoppedClock;

impl HostWallClock for StoppedClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for StoppedClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// WASI random backed by the task's seeded PRNG.
struct TaskRng(SharedCaps);

impl rand_core_wasi::TryRng for TaskRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0u8; 4];
        lock(&self.0).get::<RandomCapability>().fill_wasi(&mut b);
        Ok(u32::from_le_bytes(b))
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0u8; 8];
        lock(&self.0).get::<RandomCapability>().fill_wasi(&mut b);
        Ok(u64::from_le_bytes(b))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        lock(&self.0).get::<RandomCapability>().fill_wasi(dst);
        Ok(())
    }
}

/// stdout/stderr: accepts every write, forwards complete lines to the task log.
#[derive(Clone)]
struct LogPipe {
    caps: SharedCaps,
    level: LogLevel,
    partial: Arc<Mutex<Vec<u8>>>,
}

impl LogPipe {
    fn new(caps: SharedCaps, level: LogLevel) -> Self {
        Self {
            caps,
            level,
            partial: Arc::default(),
        }
    }

    fn accept(&self, mut bytes: &[u8]) {
        let mut partial = self.partial.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(nl) = bytes.iter().position(|&b| b == b'\n') {
            push_bounded(&mut partial, &bytes[..nl]);
            self.emit(&partial);
            partial.clear();
            bytes = &bytes[nl + 1..];
        }
        push_bounded(&mut partial, bytes);
    }

    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        lock(&self.caps)
            .get::<LogCapability>()
            .log(self.level, &text);
    }
}

impl Drop for LogPipe {
    fn drop(&mut self) {
        // The last clone (the stream in the task's table) flushes an unterminated last line.
        if Arc::strong_count(&self.partial) == 1 {
            let partial =
                std::mem::take(&mut *self.partial.lock().unwrap_or_else(|e| e.into_inner()));
            if !partial.is_empty() {
                self.emit(&partial);
            }
        }
    }
}

fn push_bounded(buf: &mut Vec<u8>, bytes: &[u8]) {
    let room = MAX_LINE_BYTES.saturating_sub(buf.len());
    buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

impl IsTerminal for LogPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LogPipe {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl OutputStream for LogPipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.accept(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for LogPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.accept(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A pollable that is always ready: sleeping happens in logical time, which costs no real time.
struct Elapsed;

#[wasmtime_wasi::async_trait]
impl Pollable for Elapsed {
    async fn ready(&mut self) {}
}

/// The `wasi:clocks/monotonic-clock` version wasmtime-wasi 48 links (guests of any 0.2.x match).
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";
/// The `wasi:clocks/wall-clock` version wasmtime-wasi 48 links.
const WALL_CLOCK: &str = "wasi:clocks/wall-clock@0.2.12";

/// Replaces the WASI clocks' `now` so a read is charged fuel like the host `now` and traps when
/// the task's trace is full.
///
/// With `timeAccess` granted every read is recorded; stock WASI clocks cost the guest a few
/// instructions and cannot stop it, so a loop on `SystemTime::now()` grew the trace (host
/// memory) by millions of events a second until the deadline.
pub(crate) fn meter_clocks(
    linker: &mut wasmtime::component::Linker<crate::state::TaskState>,
) -> wasmtime::Result<()> {
    use wasmtime_wasi::p2::bindings::clocks::wall_clock::Datetime;

    use crate::host::{Cx, charge, check_trace};

    fn read(cx: &mut Cx<'_>) -> wasmtime::Result<u64> {
        charge(cx, crate::capability::clock::NOW_FUEL, 0)?;
        let nanos = wasi_now(&mut cx.data().caps());
        check_trace(cx)?;
        Ok(nanos)
    }

    linker.allow_shadowing(true);
    linker
        .instance(MONOTONIC_CLOCK)?
        .func_wrap("now", |mut cx: Cx<'_>, (): ()| Ok((read(&mut cx)?,)))?;
    linker
        .instance(WALL_CLOCK)?
        .func_wrap("now", |mut cx: Cx<'_>, (): ()| {
            let nanos = read(&mut cx)?;
            Ok((Datetime {
                seconds: nanos / 1_000_000_000,
                nanoseconds: (nanos % 1_000_000_000) as u32,
            },))
        })?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Replaces `subscribe-duration`/`subscribe-instant` so a guest sleep returns at once.
///
/// Stock WASI sleeps on a real timer inside a host call, where the epoch deadline cannot
/// interrupt it: one `sleep(1h)` would hold a worker thread for an hour. Virtual time keeps
/// deadlines enforceable and runs deterministic.
pub(crate) fn virtualise_sleep(
    linker: &mut wasmtime::component::Linker<crate::state::TaskState>,
) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::p2::DynPollable;

    fn elapsed(state: &mut crate::state::TaskState) -> wasmtime::Result<(Resource<DynPollable>,)> {
        let resource = state.table.push(Elapsed)?;
        Ok((wasmtime_wasi::p2::subscribe(&mut state.table, resource)?,))
    }

    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap(
        "subscribe-duration",
        |mut cx: wasmtime::StoreContextMut<'_, crate::state::TaskState>, (_,): (u64,)| {
            elapsed(cx.data_mut())
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |mut cx: wasmtime::StoreContextMut<'_, crate::state::TaskState>, (_,): (u64,)| {
            elapsed(cx.data_mut())
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// WASI wall and monotonic clocks: the logical clock with `timeAccess`, else 0. A replay that
/// diverges here also yields 0; the divergence shows in the trace digest.
fn wasi_now(caps: &mut TaskCapabilities) -> u64 {
    caps.with(|c: &mut ClockCapability, rec| c.wasi_now(rec))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shadowed_clock_interface_is_the_one_wasi_links() {
        let engine = wasmtime::Engine::default();
        let mut linker = wasmtime::component::Linker::<crate::state::TaskState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).expect("wasi");
        // Without shadowing, redefining an existing function fails: proves the name matches.
        let mut clock = linker.instance(MONOTONIC_CLOCK).expect("instance");
        let redefined = clock.func_wrap(
            "subscribe-duration",
            |_: wasmtime::StoreContextMut<'_, crate::state::TaskState>, (_,): (u64,)| Ok(()),
        );
        assert!(
            redefined.is_err(),
            "{MONOTONIC_CLOCK} is not what wasmtime-wasi links"
        );
    }

    #[test]
    fn the_shadowed_wall_clock_is_the_one_wasi_links() {
        let engine = wasmtime::Engine::default();
        let mut linker = wasmtime::component::Linker::<crate::state::TaskState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).expect("wasi");
        let mut clock = linker.instance(WALL_CLOCK).expect("instance");
        let redefined = clock.func_wrap(
            "now",
            |_: wasmtime::StoreContextMut<'_, crate::state::TaskState>, (): ()| Ok(()),
        );
        assert!(
            redefined.is_err(),
            "{WALL_CLOCK} is not what wasmtime-wasi links"
        );
    }

    #[test]
    fn insecure_seed_depends_on_the_task_seed() {
        assert_ne!(insecure_seed(&[1; 32]), insecure_seed(&[2; 32]));
    }
}
