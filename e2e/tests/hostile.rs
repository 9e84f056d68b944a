//! Hostile guests in the cluster (issue 7, item 1): every hostile example agent, and the same
//! attacks through the `gauntlet` agent whose input picks hostile or benign behaviour, run
//! `ARI_HOSTILE_RUNS` times each (default 100) interleaved with normal Tasks. One Agent has one
//! module, so a hostile example agent's executors can only share work with that same agent:
//! `flood` gets benign Tasks (`0` MiB) between its floods, and the gauntlet's executors run
//! every attack between `echo` Tasks. Asserted: each hostile Task ends with its own reason,
//! every normal Task succeeds, no executor restarts (restartCount 0, same pid), and each
//! executor's resident memory returns to within [`RSS_TOLERANCE`] of its baseline.
//! Run: `cargo build --bins && scripts/build-agents.sh && cargo test -p ari-e2e --test hostile`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use ari_crds::{Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::stress::{self, ExecutorProcess, TaskView};
use ari_e2e::{trials, wait};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// How far above its warmed-up baseline an executor's RSS may stay after the run: room for
/// allocator caches and the pooling allocator's resident slot pages, far below what the attacks
/// allocate (each balloon alone touches its whole 32 MiB limit, 100 times).
const RSS_TOLERANCE: u64 = 64 << 20;

/// Selects every executor pod.
const EXECUTORS: &str = "app.kubernetes.io/name=ari-executor";

/// Fuel budget of the Tasks meant to run out of fuel: stops them within milliseconds.
const SMALL_FUEL: u64 = 20_000_000;

fn main() -> std::process::ExitCode {
    trials::run(vec![
        (
            "gauntlet_attacks_and_normal_tasks_share_executors",
            gauntlet,
        ),
        (
            "hostile_example_agents_stop_with_their_own_reasons",
            example_agents,
        ),
        (
            "hostile_example_agents_sharing_one_pool_pod_stop_with_their_own_reasons",
            pooled_example_agents,
        ),
    ])
}

/// Runs per case, from `ARI_HOSTILE_RUNS` (default 100, as issue 7 asks).
fn runs() -> usize {
    std::env::var("ARI_HOSTILE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

/// Extra checks on a finished Task beyond its phase and reason.
type Check = fn(&Task) -> std::result::Result<(), String>;

/// One kind of Task: which Agent, what input, what it must end with.
struct Case {
    label: &'static str,
    agent: &'static str,
    input: String,
    spec: serde_json::Value,
    hostile: bool,
    want: (TaskPhase, TaskReason),
    check: Option<Check>,
}

impl Case {
    fn hostile(label: &'static str, agent: &'static str, input: &str, reason: TaskReason) -> Case {
        Case {
            label,
            agent,
            input: input.to_string(),
            spec: json!({}),
            hostile: true,
            want: (TaskPhase::Failed, reason),
            check: None,
        }
    }

    fn normal(label: &'static str, agent: &'static str, input: &str, check: Check) -> Case {
        Case {
            label,
            agent,
            input: input.to_string(),
            spec: json!({}),
            hostile: false,
            want: (TaskPhase::Succeeded, TaskReason::Completed),
            check: Some(check),
        }
    }

    /// A hostile Task whose attack fails inside the guest, which then reports it and ends `ok`.
    fn probe(label: &'static str, agent: &'static str, input: &str, check: Check) -> Case {
        Case {
            hostile: true,
            ..Case::normal(label, agent, input, check)
        }
    }

    fn fuel(mut self, fuel: u64) -> Case {
        self.spec = json!({ "fuel": fuel });
        self
    }

    /// `deadlineSeconds` counts from the Task's creation: the executor stops the guest at
    /// what is left, or the operator fails a Task still queued — `DeadlineExceeded` either way.
    fn deadline(mut self, seconds: u32) -> Case {
        self.spec = json!({ "deadlineSeconds": seconds });
        self
    }

    fn check(mut self, check: Check) -> Case {
        self.check = Some(check);
        self
    }
}

fn message(t: &Task) -> String {
    t.status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

fn output(t: &Task) -> String {
    t.status
        .as_ref()
        .and_then(|s| s.output.clone())
        .unwrap_or_default()
}

fn memory_limit_hit(t: &Task) -> std::result::Result<(), String> {
    let m = message(t);
    if m.contains("memory limit") {
        Ok(())
    } else {
        Err(format!("message does not name the memory limit: {m:?}"))
    }
}

fn contained(t: &Task) -> std::result::Result<(), String> {
    let m = message(t);
    if m.contains("contained") {
        Ok(())
    } else {
        Err(format!("message {m:?}"))
    }
}

/// The echo Tasks' input is `echo TEXT`: the output must be TEXT.
fn echoed(t: &Task) -> std::result::Result<(), String> {
    let want = t.name_any();
    if output(t) == want {
        Ok(())
    } else {
        Err(format!("output {:?}, want {want:?}", output(t)))
    }
}

fn empty_output(t: &Task) -> std::result::Result<(), String> {
    let s = t.status.clone().unwrap_or_default();
    if s.output.as_deref().unwrap_or("").is_empty() && s.output_ref.is_none() {
        Ok(())
    } else {
        Err(format!("output {:?} / {:?}", s.output, s.output_ref))
    }
}

fn counted(t: &Task) -> std::result::Result<(), String> {
    if output(t).contains("\"words\":3") {
        Ok(())
    } else {
        Err(format!("output {:?}", output(t)))
    }
}

/// The victim is `counter`: each Task returns the new count.
fn counted_up(t: &Task) -> std::result::Result<(), String> {
    match output(t).parse::<u64>() {
        Ok(n) if n > 0 => Ok(()),
        _ => Err(format!("output {:?}", output(t))),
    }
}

/// `wasi-escape`'s report: nothing leaked.
fn no_leaks(t: &Task) -> std::result::Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(&output(t)).map_err(|e| e.to_string())?;
    if v["leaks"] == 0 {
        Ok(())
    } else {
        Err(format!("wasi-escape leaked: {v}"))
    }
}

/// `snoop`'s report: whatever it read is its own earlier `snooped` writes (runs repeat in the
/// same Agent), never the victim's counter.
fn found_only_own_writes(t: &Task) -> std::result::Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(&output(t)).map_err(|e| e.to_string())?;
    let found = v["found"].as_array().ok_or("no found list")?;
    if found.iter().all(|f| f["value"] == "snooped") {
        Ok(())
    } else {
        Err(format!("snoop read another Agent's data: {v}"))
    }
}

/// Every attack and an `echo` after each, all on the same two gauntlet executors.
fn gauntlet(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("gauntlet", |client, ns| async move {
        ctx.module_configmap(&ns, "gauntlet-module", "gauntlet")?;
        ctx.apply_ok(
            &ns,
            &agent_yaml(
                "gauntlet",
                "gauntlet-module",
                2,
                "  limits:\n    fuel: 100000000000\n    memoryBytes: 33554432\n    timeoutSeconds: 10\n    maxOutputBytes: 1048576\n",
            ),
        )?;
        agent_ready(&client, &ns, "gauntlet").await?;
        use TaskReason::*;
        let g = "gauntlet";
        let attacks = vec![
            Case::hostile("spin-fuel", g, "spin", FuelExhausted).fuel(SMALL_FUEL),
            Case::hostile("spin-deadline", g, "spin", DeadlineExceeded).deadline(1),
            Case::hostile("balloon", g, "balloon", Trap).check(memory_limit_hit),
            Case::hostile("mega", g, "mega", Trap).check(memory_limit_hit),
            Case::hostile("deep", g, "deep", Trap),
            Case::hostile("trap", g, "trap", Trap),
            Case::hostile("exit", g, "exit", Trap),
            Case::hostile("flood", g, "flood 4", OutputTooLarge),
            Case::hostile("exfil", g, "exfil https://evil.example/collect", CapabilityDenied),
            // Host calls cost far more host time per fuel unit: a smaller budget keeps these
            // short on a loaded machine.
            Case::hostile("hostcall", g, "hostcall", FuelExhausted).fuel(SMALL_FUEL / 10),
            Case::hostile("loud", g, "loud", FuelExhausted).fuel(SMALL_FUEL / 10),
            Case::hostile("wasi", g, "wasi", AgentError).check(contained),
        ];
        // An echo after every attack: `echo <its own name>`, filled in by `run_cases`.
        let mut cases = Vec::new();
        for a in attacks {
            cases.push(a);
            cases.push(Case::normal("echo", g, "", echoed));
        }
        run_cases(ctx, &client, &ns, &cases, ("ari.dev/agent=gauntlet", 2), Warm::Benign).await
    })
}

/// The hostile example agents, each its own Agent with tight limits, interleaved with Tasks of
/// the well-behaved `echo` and `wordcount` (and benign `flood` Tasks on the flood executor).
fn example_agents(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("hostile", |client, ns| async move {
        let agents = example_agent_specs(true);
        for (name, extra) in &agents {
            ctx.module_configmap(&ns, &format!("{name}-module"), module_of(name))?;
            ctx.apply_ok(&ns, &agent_yaml(name, &format!("{name}-module"), 1, extra))?;
        }
        for (name, _) in &agents {
            agent_ready(&client, &ns, name).await?;
        }
        let cases = example_cases(&ns, true);
        run_cases(
            ctx,
            &client,
            &ns,
            &cases,
            (EXECUTORS, agents.len()),
            Warm::Benign,
        )
        .await
    })
}

/// The same agents and Tasks at pool density (issue 29, item 5): every example agent that needs
/// no store is its own Agent in one ExecutorPool of one pod, so each attack runs beside the
/// others and the well-behaved Agents in one process. The same outcomes, no restart, and the
/// pod's memory back near its baseline. (The storage agents keep dedicated executors here:
/// a pooled store needs the shared Redis.)
fn pooled_example_agents(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("hostile-pool", |client, ns| async move {
        ctx.apply_ok(&ns, &pool_yaml("hostile", 1, 16))?;
        let agents = example_agent_specs(false);
        for (name, extra) in &agents {
            ctx.module_configmap(&ns, &format!("{name}-module"), module_of(name))?;
            ctx.apply_ok(
                &ns,
                &pooled_yaml(name, &format!("{name}-module"), "hostile", 2, extra),
            )?;
        }
        for (name, _) in &agents {
            agent_ready_within(&client, &ns, name, wait::DEFAULT).await?;
        }
        let cases = example_cases(&ns, false);
        run_cases(
            ctx,
            &client,
            &ns,
            &cases,
            ("ari.dev/pool=hostile", 1),
            Warm::Every,
        )
        .await?;
        spinner_goes_to_the_background(ctx, &client, &ns).await
    })
}

/// CPU shares in the pool pod: a spinner that runs to its deadline is lowered to background
/// priority (`ari_executor_background_tasks_total` of its Agent rises), while one-at-a-time
/// `echo` Tasks beside it succeed and are never lowered.
async fn spinner_goes_to_the_background(ctx: &Ctx, client: &Client, ns: &str) -> Result<()> {
    let before = background_tasks(client, ns).await?;
    ctx.apply_ok(ns, &task_yaml("spin-long", "spin", "", ""))?;
    let mut quiet = 0;
    loop {
        let name = format!("quiet-{quiet}");
        ctx.apply_ok(ns, &task_yaml(&name, "echo", &name, ""))?;
        let t = task_finished(client, ns, &name, wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        quiet += 1;
        let spin = Api::<Task>::namespaced(client.clone(), ns)
            .get("spin-long")
            .await?;
        if spin
            .status
            .and_then(|s| s.phase)
            .is_some_and(|p| p.is_finished())
        {
            break;
        }
    }
    let spin = task_finished(client, ns, "spin-long", wait::DEFAULT).await?;
    expect_reason(&spin, TaskPhase::Failed, TaskReason::DeadlineExceeded)?;
    let after = background_tasks(client, ns).await?;
    let rose = |agent: &str| {
        let get = |m: &BTreeMap<String, u64>| m.get(agent).copied().unwrap_or(0);
        get(&after).saturating_sub(get(&before))
    };
    println!(
        "background Tasks during the spin (of {quiet} quiet echoes): {after:?} from {before:?}"
    );
    ensure!(
        rose("spin") >= 1,
        "the spinner was never lowered: {after:?}"
    );
    ensure!(
        rose("echo") == 0,
        "a quiet echo was lowered: {before:?} -> {after:?}"
    );
    Ok(())
}

/// `ari_executor_background_tasks_total` of the pool pod, by Agent.
async fn background_tasks(client: &Client, ns: &str) -> Result<BTreeMap<String, u64>> {
    let page = pod_metrics(client, ns, "ari.dev/pool=hostile").await?;
    Ok(page
        .lines()
        .filter(|l| l.starts_with("ari_executor_background_tasks_total{"))
        .filter_map(|l| {
            let agent = l.split("agent=\"").nth(1)?.split('"').next()?;
            let value = l.rsplit(' ').next()?.parse().ok()?;
            Some((agent.to_owned(), value))
        })
        .collect())
}

/// The example agents as (name, `spec` extra); those granted storage only when `storage`.
fn example_agent_specs(storage: bool) -> Vec<(&'static str, String)> {
    let tight = "  limits:\n    fuel: 100000000000\n    memoryBytes: 33554432\n    timeoutSeconds: 5\n    maxOutputBytes: 1048576\n";
    let store = "  capabilities:\n    storage:\n      maxBytes: 65536\n";
    let mut agents = vec![
        ("spin", tight.to_string()),
        ("balloon", tight.to_string()),
        ("deep", tight.to_string()),
        ("trap", tight.to_string()),
        ("flood", tight.to_string()),
        ("exfil", tight.to_string()),
        ("hostcall-loop", tight.to_string()),
        ("mega-memory", tight.to_string()),
        ("wasi-escape", tight.to_string()),
        ("loud-log", tight.to_string()),
        ("echo", String::new()),
        ("wordcount", String::new()),
    ];
    if storage {
        agents.extend([
            ("hoarder", format!("{tight}{store}")),
            ("snoop", format!("{tight}{store}")),
            ("victim", store.to_string()),
        ]);
    }
    agents
}

/// The example agent an Agent runs: its own name, but `victim` is `counter`.
fn module_of(name: &str) -> &str {
    if name == "victim" { "counter" } else { name }
}

/// Every hostile example agent's Task with a well-behaved one after each; those of Agents
/// granted storage only when `storage`.
fn example_cases(ns: &str, storage: bool) -> Vec<Case> {
    use TaskReason::*;
    let victim_scope = format!("{ns}/victim\nsecret");
    let cases = vec![
        Case::hostile("spin", "spin", "", FuelExhausted).fuel(SMALL_FUEL),
        Case::normal("echo", "echo", "", echoed),
        Case::hostile("balloon", "balloon", "", Trap).check(memory_limit_hit),
        Case::normal("wordcount", "wordcount", "one two three", counted),
        Case::hostile("deep", "deep", "", Trap),
        Case::normal("echo", "echo", "", echoed),
        Case::hostile("trap", "trap", "", Trap),
        Case::normal("wordcount", "wordcount", "one two three", counted),
        Case::hostile("flood", "flood", "4", OutputTooLarge),
        Case::normal("flood-zero", "flood", "0", empty_output),
        Case::hostile(
            "exfil",
            "exfil",
            "https://evil.example/collect",
            CapabilityDenied,
        ),
        Case::normal("echo", "echo", "", echoed),
        Case::hostile("hoarder", "hoarder", "1024", CapabilityDenied),
        Case::normal("wordcount", "wordcount", "one two three", counted),
        Case::hostile("hostcall-loop", "hostcall-loop", "log", FuelExhausted).fuel(SMALL_FUEL),
        Case::normal("echo", "echo", "", echoed),
        Case::hostile("mega-memory", "mega-memory", "grow", Trap).check(memory_limit_hit),
        Case::normal("victim", "victim", "secret", counted_up),
        Case::hostile("loud-log", "loud-log", "", FuelExhausted).fuel(SMALL_FUEL),
        Case::normal("echo", "echo", "", echoed),
        // These two must not get anywhere, yet end `ok`, reporting what they found.
        Case::probe("wasi-escape", "wasi-escape", "", no_leaks),
        Case::probe("snoop", "snoop", &victim_scope, found_only_own_writes),
    ];
    let granted: Vec<&str> = example_agent_specs(storage)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    cases
        .into_iter()
        .filter(|c| granted.contains(&c.agent))
        .collect()
}

/// Which Tasks warm the executors up before their memory baseline is taken.
#[derive(Clone, Copy)]
enum Warm {
    /// The well-behaved ones: a dedicated executor loads its module when it starts.
    Benign,
    /// One of every case too: a pool pod loads an Agent's module on its first Task, so its
    /// baseline holds every module it will run, as a dedicated executor's does.
    Every,
}

/// Creates `runs()` rounds of `cases` in order, waits for all, then checks every outcome, the
/// executors' restarts and pids, and their memory against the warmed-up baseline.
async fn run_cases(
    ctx: &Ctx,
    client: &Client,
    ns: &str,
    cases: &[Case],
    (executors, pods): (&str, usize),
    warm: Warm,
) -> Result<()> {
    wait::until("executor pods Ready", wait::DEFAULT, || {
        ready_pods(client, ns, executors, pods)
    })
    .await?;
    let view = TaskView::start(client, ns);

    // Warm up: every Agent runs a few benign-or-not Tasks of its own so the baseline includes
    // the loaded module, the runtime's pools and the API client's buffers.
    let mut warm_up = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let n = match (c.hostile, warm) {
            (false, _) => 4,
            (true, Warm::Every) => 1,
            (true, Warm::Benign) => 0,
        };
        for j in 0..n {
            warm_up.push(case_task(c, &format!("warm-{i}-{j}"))?);
        }
    }
    let warm_n = warm_up.len();
    stress::create_tasks(client, ns, warm_up, 8).await?;
    view.wait_all_finished(warm_n, wait::DEFAULT, || {}).await?;

    let before = stress::executor_processes(client, &ctx.node, ns, executors).await?;
    ensure!(
        before.len() == pods,
        "{} executor processes, want {pods}: {before:?}",
        before.len()
    );
    let baseline: BTreeMap<String, u64> = before
        .iter()
        .map(|p| (p.pod.clone(), stress::rss_bytes(p.pid).unwrap_or(0)))
        .collect();

    let rounds = runs();
    let mut tasks = Vec::new();
    for round in 0..rounds {
        for (i, c) in cases.iter().enumerate() {
            tasks.push(case_task(c, &format!("{}-{round}-{i}", c.label))?);
        }
    }
    let total = tasks.len() + warm_n;
    let started = Instant::now();
    stress::create_tasks(client, ns, tasks, 16).await?;
    let mut peak: BTreeMap<String, u64> = BTreeMap::new();
    view.wait_all_finished(total, Duration::from_secs(1800), || {
        for p in &before {
            let rss = stress::rss_bytes(p.pid).unwrap_or(0);
            let e = peak.entry(p.pod.clone()).or_default();
            *e = (*e).max(rss);
        }
    })
    .await?;
    let elapsed = started.elapsed();

    // Outcomes.
    let by_label: BTreeMap<&str, &Case> = cases.iter().map(|c| (c.label, c)).collect();
    let mut tally: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for t in view.tasks() {
        let label = t.labels().get("ari.dev/case").cloned().unwrap_or_default();
        let Some(case) = by_label.get(label.as_str()) else {
            wrong.push(format!("{}: no case label", t.name_any()));
            continue;
        };
        let got = stress::outcome(&t);
        *tally
            .entry((label.clone(), format!("{got:?}")))
            .or_default() += 1;
        if got != (Some(case.want.0), Some(case.want.1)) {
            wrong.push(format!(
                "{} ended {got:?}, want {:?}: {}",
                t.name_any(),
                case.want,
                message(&t)
            ));
        } else if let Some(check) = case.check
            && let Err(e) = check(&t)
        {
            wrong.push(format!("{}: {e}", t.name_any()));
        }
    }
    let hostile_n = cases.iter().filter(|c| c.hostile).count() * rounds;
    eprintln!(
        "hostile[{ns}]: {hostile_n} hostile and {} normal Tasks ({rounds} rounds, {warm_n} warm-up) in {:.1} s",
        total - hostile_n - warm_n,
        elapsed.as_secs_f64()
    );
    for ((label, got), n) in &tally {
        eprintln!("  {label:>14}: {n:>5} × {got}");
    }
    ensure!(
        wrong.is_empty(),
        "{} Tasks ended wrongly, e.g.:\n{}",
        wrong.len(),
        wrong
            .iter()
            .take(15)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Executors: same processes, no restarts.
    let after = stress::executor_processes(client, &ctx.node, ns, executors).await?;
    let same = |a: &[ExecutorProcess], b: &[ExecutorProcess]| {
        a.iter()
            .map(|p| (&p.pod, p.pid))
            .eq(b.iter().map(|p| (&p.pod, p.pid)))
    };
    ensure!(
        same(&before, &after) && after.iter().all(|p| p.restarts == 0),
        "executors changed or restarted:\nbefore {before:?}\nafter  {after:?}"
    );

    // Memory: back within the tolerance of the baseline once the attacks are over.
    let settled = wait::until("executor RSS back near baseline", wait::DEFAULT, || {
        let now: BTreeMap<String, u64> = after
            .iter()
            .map(|p| (p.pod.clone(), stress::rss_bytes(p.pid).unwrap_or(0)))
            .collect();
        let over: Vec<String> = now
            .iter()
            .filter(|(pod, rss)| **rss > baseline.get(*pod).copied().unwrap_or(0) + RSS_TOLERANCE)
            .map(|(pod, rss)| format!("{pod}: {}", stress::mib(*rss)))
            .collect();
        async move {
            if over.is_empty() {
                Ok(now)
            } else {
                Err(format!(
                    "over baseline + {}: {over:?}",
                    stress::mib(RSS_TOLERANCE)
                ))
            }
        }
    })
    .await;
    for p in &after {
        let b = baseline.get(&p.pod).copied().unwrap_or(0);
        let now = stress::rss_bytes(p.pid).unwrap_or(0);
        eprintln!(
            "  {:>40}: RSS baseline {}, peak {}, after {}",
            p.pod,
            stress::mib(b),
            stress::mib(peak.get(&p.pod).copied().unwrap_or(0)),
            stress::mib(now)
        );
    }
    settled?;
    Ok(())
}

/// The Task of one case, named `name`, labelled with its case.
fn case_task(c: &Case, name: &str) -> Result<Task> {
    // Echo cases carry their own name, so each output is checked against its own Task.
    let input = if c.agent == "gauntlet" && c.label == "echo" {
        format!("echo {name}")
    } else if c.agent == "echo" {
        name.to_string()
    } else {
        c.input.clone()
    };
    stress::task(
        name,
        c.agent,
        &input,
        c.spec.clone(),
        &[("ari.dev/case", c.label)],
    )
}
