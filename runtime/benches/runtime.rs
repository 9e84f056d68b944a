//! Runtime benchmarks (a `harness = false` bench binary; results go to BENCHMARKS.md).
//!
//! Run: `scripts/build-agents.sh && cargo bench -p ari-runtime --bench runtime`
//! (`ARI_BENCH_TASKS=N` changes the number of timed echo tasks, default 20000).

#[path = "../../examples/agents/sha256-loop/src/kernel.rs"]
#[allow(dead_code, unused_imports)]
mod kernel;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ari_runtime::{
    EngineOptions, Grants, Limits, LoadedAgent, Runtime, RuntimeConfig, TaskRequest,
};
use ed25519_dalek::SigningKey;

fn agent_bytes(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("ARI_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let path = dir.join("agents").join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/build-agents.sh", path.display()))
}

fn runtime(cache: Option<PathBuf>) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: cache,
        engine: EngineOptions::default(),
    })
    .expect("runtime")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn rss_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn request(input: &[u8], key: &Arc<SigningKey>, fuel: u64) -> TaskRequest {
    let mut req = TaskRequest::new("bench", input.to_vec(), key.clone());
    req.grants = Grants::default();
    req.limits = Limits {
        fuel,
        ..Limits::default()
    };
    req
}

fn run_ok(agent: &LoadedAgent, req: TaskRequest) -> ari_runtime::TaskOutcome {
    let o = agent.run(req);
    assert!(o.failure.is_none(), "{:?}", o.failure);
    o
}

fn main() {
    let key = Arc::new(SigningKey::from_bytes(&[1; 32]));
    // `ARI_BENCH_ONLY=tools` (or `models`, `echo`, `sha256`): only that part, on a cached
    // runtime. `echo` is also the profiling entry: see `profiled_tasks`.
    if let Ok(only) = std::env::var("ARI_BENCH_ONLY") {
        let cache = tempfile::tempdir().expect("tmp");
        let rt = runtime(Some(cache.path().into()));
        let n = std::env::var("ARI_BENCH_TASKS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2_000);
        match only.as_str() {
            "tools" => tool_calls(&rt, &key, n),
            "models" => model_calls(&rt, &key, n),
            "echo" => {
                let agent = rt.load(&agent_bytes("echo")).expect("load");
                echo_tasks(&agent, &key, n);
            }
            "sha256" => sha256_loop(&rt, &key),
            other => panic!("ARI_BENCH_ONLY={other}: tools, models, echo or sha256"),
        }
        return;
    }
    let echo = agent_bytes("echo");
    let big_name = "clock";
    let big = agent_bytes(big_name);
    let rt_nocache = runtime(None);
    println!("allocator: {:?}", rt_nocache.allocator());

    // Cold compile (no cache).
    for (name, bytes) in [("echo", &echo), (big_name, &big)] {
        let times: Vec<Duration> = (0..5)
            .map(|_| {
                let t = Instant::now();
                rt_nocache.load(bytes).expect("load");
                t.elapsed()
            })
            .collect();
        println!(
            "cold compile {name} ({} KiB): median {:?}",
            bytes.len() / 1024,
            median(times)
        );
    }

    // Cached load (artifact on disk, fresh Runtime does not compile).
    let cache = tempfile::tempdir().expect("tmp");
    runtime(Some(cache.path().into()))
        .load(&echo)
        .expect("warm cache");
    let rt = runtime(Some(cache.path().into()));
    let times: Vec<Duration> = (0..50)
        .map(|_| {
            let t = Instant::now();
            rt.load(&echo).expect("load");
            t.elapsed()
        })
        .collect();
    assert_eq!(rt.stats().compiles, 0);
    println!("cached load echo: median {:?}", median(times));

    // Per-task overhead of echo.
    let agent = rt.load(&echo).expect("load");
    let n: usize = std::env::var("ARI_BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    echo_tasks(&agent, &key, n);
    sha256_loop(&rt, &key);

    // RSS across 1000 tasks in a row.
    let before = rss_kib("VmRSS:");
    for _ in 0..1000 {
        run_ok(&agent, request(b"hello", &key, 1_000_000));
    }
    let after_1k = rss_kib("VmRSS:");
    for _ in 0..1000 {
        run_ok(&agent, request(b"hello", &key, 1_000_000));
    }
    let after_2k = rss_kib("VmRSS:");
    println!(
        "RSS: before {before} KiB, after 1000 tasks {after_1k} KiB, after 2000 {after_2k} KiB, peak (VmHWM) {} KiB",
        rss_kib("VmHWM:")
    );

    // Memory per pooled slot: RSS growth when N instances are alive at once.
    let slots = 32usize;
    let before = rss_kib("VmRSS:");
    std::thread::scope(|s| {
        let barrier = Arc::new(std::sync::Barrier::new(slots));
        for _ in 0..slots {
            let (agent, key, barrier) = (agent.clone(), key.clone(), barrier.clone());
            s.spawn(move || {
                barrier.wait();
                run_ok(&agent, request(b"hello", &key, 1_000_000));
            });
        }
    });
    let after = rss_kib("VmRSS:");
    println!(
        "pooled slots: {slots} instances used -> RSS +{} KiB ({} KiB per slot incl. thread stacks)",
        after.saturating_sub(before),
        after.saturating_sub(before) / slots as u64
    );

    model_calls(&rt, &key, n.min(2_000));
    tool_calls(&rt, &key, n.min(500));
}

/// Per-task overhead of `echo`: `n` timed tasks after 500 to warm up, then the signature
/// alone. With `ARI_BENCH_PROFILE=1` only [`profiled_tasks`] runs (no timing), for callgrind.
fn echo_tasks(agent: &LoadedAgent, key: &Arc<SigningKey>, n: usize) {
    for _ in 0..500 {
        run_ok(agent, request(b"hello", key, 1_000_000));
    }
    if std::env::var_os("ARI_BENCH_PROFILE").is_some() {
        profiled_tasks(agent, key, n);
        return;
    }
    let mut times = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        run_ok(agent, request(b"hello", key, 1_000_000));
        times.push(t.elapsed());
    }
    let total = start.elapsed();
    times.sort();
    println!(
        "echo per-task (instantiate+initialize+can-execute+execute+meter+sign): p50 {:?} p99 {:?}",
        pct(&times, 0.50),
        pct(&times, 0.99)
    );
    println!(
        "echo tasks/s on one thread: {:.0}",
        n as f64 / total.as_secs_f64()
    );
    // A run's signed message (the DSSE PAE of its Statement) is about 1.3 KiB.
    let message = [0u8; 1300];
    let time = |sign: &dyn Fn() -> [u8; 64]| {
        let times: Vec<Duration> = (0..2000)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(sign());
                t.elapsed()
            })
            .collect();
        median(times)
    };
    let runtime = time(&|| ari_runtime::attestation::ed25519_sign(key, &message));
    let dalek = time(&|| {
        use ed25519_dalek::Signer;
        key.sign(&message).to_bytes()
    });
    println!(
        "  of which Ed25519 attestation signature: median {runtime:?} (ed25519-dalek: {dalek:?})"
    );
}

/// `n` echo tasks and nothing else, so a profiler can count just them:
/// `valgrind --tool=callgrind --toggle-collect='*profiled_tasks*' <bench> --bench` with
/// `ARI_BENCH_ONLY=echo ARI_BENCH_PROFILE=1`.
#[inline(never)]
fn profiled_tasks(agent: &LoadedAgent, key: &Arc<SigningKey>, n: usize) {
    for _ in 0..n {
        std::hint::black_box(run_ok(agent, request(b"hello", key, 1_000_000)));
    }
}

/// sha256-loop: wasm as the product runs it (fuel and epochs on) vs native, and what each
/// code generation setting costs: fuel off, epoch checks off, both off, Cranelift `opt_level`
/// none. Every variant runs once per round, rounds interleaved, medians of 5.
fn sha256_loop(rt: &Runtime, key: &Arc<SigningKey>) {
    let rounds = 300_000u32;
    let input = format!("{rounds} abc").into_bytes();
    let module = agent_bytes("sha256-loop");
    let product = rt.load(&module).expect("load sha");
    let variant = |opts: EngineOptions| {
        let rt = Runtime::new(RuntimeConfig {
            cache_dir: None,
            engine: opts,
        })
        .expect("runtime");
        rt.load(&module).expect("load sha")
    };
    let fuel_off = || EngineOptions {
        consume_fuel: false,
        ..Default::default()
    };
    let epoch_off = || EngineOptions {
        epoch_interruption: false,
        ..Default::default()
    };
    let variants = [
        ("wasm, fuel off", variant(fuel_off()), 0),
        ("wasm, epochs off", variant(epoch_off()), u64::MAX / 4),
        (
            "wasm, fuel and epochs off",
            variant(EngineOptions {
                epoch_interruption: false,
                ..fuel_off()
            }),
            0,
        ),
        // Bounds checks: a 4 GiB reservation plus guard lets Cranelift drop them; if the pool's
        // slots did not have that, mmap-per-instance memories (the engine's defaults) would.
        (
            "wasm, on-demand allocator",
            variant(EngineOptions {
                allocator: ari_runtime::AllocatorChoice::OnDemand,
                ..Default::default()
            }),
            u64::MAX / 4,
        ),
        (
            "wasm, cranelift opt_level none",
            variant(EngineOptions {
                cranelift_opt_level: wasmtime::OptLevel::None,
                ..Default::default()
            }),
            u64::MAX / 4,
        ),
    ];
    let mut wasm = Vec::new();
    let mut others: Vec<Vec<Duration>> = vec![Vec::new(); variants.len()];
    let mut native = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let o = run_ok(&product, request(&input, key, u64::MAX / 4));
        wasm.push(t.elapsed());
        let out = String::from_utf8_lossy(&o.output).into_owned();
        for ((_, agent, fuel), times) in variants.iter().zip(&mut others) {
            let t = Instant::now();
            let o = run_ok(agent, request(&input, key, *fuel));
            times.push(t.elapsed());
            assert_eq!(o.output, out.as_bytes(), "variants disagree");
        }
        let t = Instant::now();
        let h = kernel::sha256_loop(std::hint::black_box(b"abc"), rounds);
        native.push(t.elapsed());
        assert_eq!(hex::encode(h), out, "wasm and native disagree");
    }
    let others: Vec<Duration> = others.into_iter().map(median).collect();
    let (w, wn, n_) = (median(wasm), others[0], median(native));
    println!("sha256-loop {rounds} rounds: wasm+fuel {w:?}, wasm no fuel {wn:?}, native {n_:?}");
    println!(
        "  wasm/native {:.2}, fuel on/off {:.2}",
        w.as_secs_f64() / n_.as_secs_f64(),
        w.as_secs_f64() / wn.as_secs_f64()
    );
    for ((name, _, _), t) in variants.iter().zip(&others) {
        println!(
            "  {name}: {t:?}, /native {:.2}, product/this {:.2}",
            t.as_secs_f64() / n_.as_secs_f64(),
            w.as_secs_f64() / t.as_secs_f64()
        );
    }
}

/// Host overhead of a tool call: `toolbox` calling `echo` on the official MCP Python SDK's
/// server (stateless, loopback) beside `echo` with no call, and the same exchanges (connect,
/// list, call) made directly through ari-mcp with no guest: what the task adds beyond them is
/// the runtime's own part (guest call, fuel, records, trace). Skipped without `ARI_MCP_PYTHON`.
fn tool_calls(rt: &Runtime, key: &Arc<SigningKey>, n: usize) {
    use ari_mcp::{Client, Limits as ToolLimits, Protocol, Session, Source, ToolServer};
    use ari_runtime::capability::LoadedTools;
    use ari_testkit::mcp_server::{McpServer, Mode};

    let Some(mcp) = McpServer::start_or_skip("bench", Mode::Stateless, None) else {
        println!("tool calls: skipped (no ARI_MCP_PYTHON)");
        return;
    };
    let url = url::Url::parse(&mcp.url()).expect("url");
    let server = ToolServer::new("demo", url)
        .expect("server")
        .with_protocol(Protocol::Stateless);
    let client = Client::new(ToolLimits::default()).expect("client");
    let grants = Grants::parse_cli(&["tools=demo:echo".to_owned()])
        .expect("grants")
        .with_tools(LoadedTools::live(client.clone(), [server.clone()]));
    let toolbox = rt.load(&agent_bytes("toolbox")).expect("load toolbox");
    let echo = rt.load(&agent_bytes("echo")).expect("load echo");
    let input: &[u8] = br#"call demo echo {"text":"hi"}"#;
    let calling = || {
        let mut req = request(input, key, 10_000_000);
        req.grants = grants.clone();
        req
    };
    let time = |what: &mut dyn FnMut()| {
        for _ in 0..20 {
            what();
        }
        let mut times: Vec<Duration> = (0..n)
            .map(|_| {
                let t = Instant::now();
                what();
                t.elapsed()
            })
            .collect();
        times.sort();
        (pct(&times, 0.50), pct(&times, 0.99))
    };
    let (tool50, tool99) = time(&mut || {
        run_ok(&toolbox, calling());
    });
    let (echo50, _) = time(&mut || {
        run_ok(&echo, request(input, key, 10_000_000));
    });
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (direct50, direct99) = time(&mut || {
        io.block_on(async {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let mut session = Session::new(Source::Live(client.clone()), 16 << 20, 1 << 20);
            session.list(&server, deadline).await.expect("list");
            let arguments = session
                .admit_arguments(r#"{"text":"hi"}"#)
                .expect("arguments");
            session
                .call(&server, "echo", arguments, deadline)
                .await
                .expect("call");
        });
    });
    println!(
        "toolbox (one tool call: connect, list, call on the MCP SDK's server) per-task: p50 {tool50:?} p99 {tool99:?}; echo p50 {echo50:?}"
    );
    println!(
        "  the same exchanges through ari-mcp, no guest: p50 {direct50:?} p99 {direct99:?} (the server's time and the client's)"
    );
    println!(
        "  the runtime's own part per tool call (toolbox - echo - direct, p50): {:?}",
        tool50.saturating_sub(echo50).saturating_sub(direct50)
    );
    // The runtime's own part without the network: the same run replayed from its trace (the
    // guest's call, fuel, the records served and checked), beside `echo`.
    let outcome = run_ok(&toolbox, calling());
    let report = ari_runtime::RunReport::new(outcome, input, &[]);
    let opts = ari_runtime::VerifyOptions {
        accept_embedded_key: true,
        ..Default::default()
    };
    let module = agent_bytes("toolbox");
    let (replay50, replay99) = time(&mut || {
        ari_runtime::verify_report(rt, &report, &module, &opts).expect("replays");
    });
    println!(
        "  replay of that run (no server; module from the cache): p50 {replay50:?} p99 {replay99:?}"
    );
    mcp.stop();
}

/// Host overhead of a model call: `ask` (one chat call) against a loopback OpenAI-compatible
/// server that answers at once, beside `echo`; and replaying such a run with no server.
fn model_calls(rt: &Runtime, key: &Arc<SigningKey>, n: usize) {
    use ari_llm::{Client, Endpoint, Model, ModelProvider, RetryPolicy};
    use ari_runtime::capability::LoadedModels;
    use ari_testkit::scripted::{Blocking, chat_answer};

    let server = Blocking::start(|_| chat_answer("Forty-two.", 30, 3));
    let client = Client::new(ari_llm::Limits::default(), RetryPolicy::default()).expect("client");
    let url = url::Url::parse(&server.openai_base()).expect("url");
    let model = Model::new(
        "tiny",
        Endpoint::new(ModelProvider::OpenAI, url, "scripted-1"),
    );
    let grants = Grants::parse_cli(&["models=tiny".to_owned()])
        .expect("grants")
        .with_models(LoadedModels::live(client, [model]));
    let ask = rt.load(&agent_bytes("ask")).expect("load ask");
    let echo = rt.load(&agent_bytes("echo")).expect("load echo");
    let asking = |input: &[u8]| {
        let mut req = request(input, key, 10_000_000);
        req.grants = grants.clone();
        req
    };
    let time = |agent: &LoadedAgent, make: &dyn Fn() -> TaskRequest| {
        for _ in 0..50 {
            run_ok(agent, make());
        }
        let mut times: Vec<Duration> = (0..n)
            .map(|_| {
                let t = Instant::now();
                run_ok(agent, make());
                t.elapsed()
            })
            .collect();
        times.sort();
        (pct(&times, 0.50), pct(&times, 0.99))
    };
    let (ask50, ask99) = time(&ask, &|| asking(b"What is six times seven?"));
    let (echo50, echo99) = time(&echo, &|| {
        request(b"What is six times seven?", key, 10_000_000)
    });
    println!(
        "ask (one model call, loopback server answering at once) per-task: p50 {ask50:?} p99 {ask99:?}; echo p50 {echo50:?} p99 {echo99:?}"
    );
    println!(
        "  model call overhead (ask - echo, p50, server and guest's request building included): {:?}",
        ask50.saturating_sub(echo50)
    );

    let outcome = run_ok(&ask, asking(b"What is six times seven?"));
    // Keeping the trace beside the Task (spec.trace: Keep): gzip of its JSON.
    let gz = outcome.trace.to_gzip().expect("gzip");
    let mut times: Vec<Duration> = (0..200)
        .map(|_| {
            let t = Instant::now();
            outcome.trace.to_gzip().expect("gzip");
            t.elapsed()
        })
        .collect();
    times.sort();
    println!(
        "keeping the ask run's trace: {} bytes of JSON -> {} gzip, p50 {:?}",
        serde_json::to_vec(&outcome.trace).map_or(0, |j| j.len()),
        gz.len(),
        pct(&times, 0.50)
    );
    let report = ari_runtime::RunReport::new(outcome, b"What is six times seven?", &[]);
    let opts = ari_runtime::VerifyOptions {
        accept_embedded_key: true,
        ..Default::default()
    };
    let module = agent_bytes("ask");
    let mut times: Vec<Duration> = (0..200)
        .map(|_| {
            let t = Instant::now();
            ari_runtime::verify_report(rt, &report, &module, &opts).expect("replays");
            t.elapsed()
        })
        .collect();
    times.sort();
    println!(
        "replay of the ask run (no server; module from the cache): p50 {:?} p99 {:?}",
        pct(&times, 0.50),
        pct(&times, 0.99)
    );
}
