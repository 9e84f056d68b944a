//! Hostile or benign, chosen by the input, so one Agent's executors run attacks interleaved with
//! normal work (one Agent has one module, so separate hostile agents never share an executor
//! with well-behaved ones). Input: `MODE [ARG]`.
//!
//! | mode | does | expected stop |
//! |---|---|---|
//! | `echo TEXT` | returns `TEXT` | succeeds |
//! | `spin` | loops forever | fuel or deadline |
//! | `balloon` | allocates and touches 1 MiB chunks forever | memory limit (trap) |
//! | `mega` | one `memory.grow` of 4 GiB | memory limit (trap) |
//! | `deep` | unbounded recursion | stack overflow (trap) |
//! | `trap` | `unreachable` | trap |
//! | `exit` | `std::process::exit(3)` | trap |
//! | `flood N` | returns `N` MiB | output too large |
//! | `exfil URL` | POSTs a secret to `URL` | capability denied (no network grant) |
//! | `hostcall` | calls the `hash` host function in a tight loop | fuel |
//! | `loud` | logs 64 KiB lines forever, through `log` and stdout/stderr | fuel |
//! | `wasi` | reads `/etc/passwd`, lists `/`, connects to 127.0.0.1, reads env | guest error (trap) |
//!
//! A hostile mode that returns `ok` means the sandbox failed to stop it, and its output says how.

use std::hint::black_box;
use std::io::Write;

use ari_sdk::host::{crypto, http::Request, log};
use ari_sdk::{Agent, Output, Task};

struct Gauntlet;

const MIB: usize = 1 << 20;

impl Agent for Gauntlet {
    fn execute(task: Task) -> Result<Output, String> {
        let input = task.input_str()?;
        let (mode, arg) = input.split_once(' ').unwrap_or((input, ""));
        match mode {
            "echo" => Ok(Output::from(arg)),
            "spin" => spin(arg.len() as u64),
            "balloon" => balloon(),
            "mega" => mega(),
            "deep" => Ok(Output::from(descend(0).to_string())),
            "trap" => trap(),
            "exit" => std::process::exit(3),
            "flood" => {
                let mib: usize = arg.trim().parse().map_err(|e| format!("flood N: {e}"))?;
                Ok(Output::from(vec![b'x'; mib.checked_mul(MIB).ok_or("overflow")?]))
            }
            "exfil" => {
                let resp = Request::post(arg.trim(), "secret=hunter2").send()?;
                Ok(Output::from(format!("exfiltrated: {}", resp.status)))
            }
            "hostcall" => {
                let mut h = crypto::hash(b"seed");
                loop {
                    h = crypto::hash(black_box(&h));
                }
            }
            "loud" => loud(),
            "wasi" => wasi(),
            other => Err(format!("unknown mode {other:?}")),
        }
    }
}

fn spin(seed: u64) -> Result<Output, String> {
    let mut x = seed;
    loop {
        // black_box keeps the optimiser from proving the loop side-effect free.
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
}

fn balloon() -> Result<Output, String> {
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; MIB];
        for (i, page) in chunk.chunks_mut(4096).enumerate() {
            page[0] = i as u8;
        }
        held.push(black_box(chunk));
    }
}

fn mega() -> Result<Output, String> {
    #[cfg(target_arch = "wasm32")]
    {
        // 65,536 pages of 64 KiB: 4 GiB in one step.
        let before = core::arch::wasm32::memory_grow(0, 65_536);
        if before == usize::MAX {
            return Err("memory.grow of 4 GiB returned -1".into());
        }
        Ok(Output::from(format!("grew 4 GiB at page {before}")))
    }
    #[cfg(not(target_arch = "wasm32"))]
    Err("wasm only".into())
}

/// Work after the recursive call and an escaping frame keep this from becoming a loop.
#[inline(never)]
#[allow(unconditional_recursion, reason = "unbounded recursion is the point")]
fn descend(depth: u64) -> u64 {
    let mut frame = [depth; 16];
    black_box(&mut frame);
    let below = descend(black_box(depth + 1));
    below.wrapping_add(frame[depth as usize % 16])
}

fn trap() -> Result<Output, String> {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort();
}

fn loud() -> Result<Output, String> {
    let line = "L".repeat(64 * 1024);
    loop {
        log::info(&line);
        let _ = writeln!(std::io::stdout(), "{line}");
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

/// Tries the ways out WASI might offer; any success is reported as the output.
fn wasi() -> Result<Output, String> {
    let mut escaped = Vec::new();
    if let Ok(b) = std::fs::read("/etc/passwd") {
        escaped.push(format!("read /etc/passwd ({} bytes)", b.len()));
    }
    if let Ok(d) = std::fs::read_dir("/") {
        escaped.push(format!("listed / ({} entries)", d.count()));
    }
    if std::fs::write("/tmp/ari-gauntlet", b"x").is_ok() {
        escaped.push("wrote /tmp/ari-gauntlet".into());
    }
    if std::net::TcpStream::connect("127.0.0.1:443").is_ok() {
        escaped.push("connected to 127.0.0.1:443".into());
    }
    if std::env::vars().next().is_some() {
        escaped.push("saw environment variables".into());
    }
    if escaped.is_empty() {
        Err("contained: no file system, socket or environment".into())
    } else {
        Ok(Output::from(format!("escaped: {}", escaped.join("; "))))
    }
}

ari_sdk::export_agent!(Gauntlet);
