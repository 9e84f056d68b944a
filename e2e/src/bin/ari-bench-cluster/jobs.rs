//! The Kubernetes-native baseline: one `batch/v1` Job per task whose pod runs `ari run` on
//! the same module and input. The node agent starts the pod as a host process (no image pull,
//! no container runtime), so this is a lower bound on what a real Job costs.

use std::time::Duration;

use anyhow::Result;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::tasks::input_for;
use crate::tracker::Tracker;
use crate::{Bench, Report};

const JOB_LABEL: &str = "bench.ari.dev/job";

fn job(name: &str, agent: &str) -> Result<Job> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {JOB_LABEL: "true"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {JOB_LABEL: "true"}},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "containers": [{
                        "name": "run",
                        "image": format!("{}:bench", ari_e2e::EXECUTOR_IMAGE),
                        "args": ["run", "/module/module.wasm", "--input", input_for(agent)],
                        "volumeMounts": [{"name": "module", "mountPath": "/module"}],
                    }],
                    "volumes": [{"name": "module", "configMap": {"name": format!("{agent}-module")}}],
                }
            }
        }
    }))?)
}

/// Job names → tracker: Running when its pod is first seen Running, finished on Complete/Failed.
fn watch(bench: &Bench, tracker: Tracker) -> Vec<tokio::task::JoinHandle<()>> {
    let jobs: Api<Job> = Api::namespaced(bench.client.clone(), &bench.ns);
    let pods: Api<Pod> = Api::namespaced(bench.client.clone(), &bench.ns);
    let t = tracker.clone();
    let job_watch = tokio::spawn(async move {
        let s = watcher(
            jobs,
            watcher::Config::default().labels(&format!("{JOB_LABEL}=true")),
        )
        .applied_objects();
        let mut s = std::pin::pin!(s);
        while let Ok(Some(j)) = s.try_next().await {
            let conds = j
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            let is = |ty: &str| conds.iter().any(|c| c.type_ == ty && c.status == "True");
            if is("Complete") {
                t.finished(&j.name_any(), true);
            } else if is("Failed") {
                t.finished(&j.name_any(), false);
            }
        }
    });
    let pod_watch = tokio::spawn(async move {
        let s = watcher(
            pods,
            watcher::Config::default().labels(&format!("{JOB_LABEL}=true")),
        )
        .applied_objects();
        let mut s = std::pin::pin!(s);
        while let Ok(Some(p)) = s.try_next().await {
            let phase = p.status.as_ref().and_then(|s| s.phase.clone());
            if matches!(phase.as_deref(), Some("Running" | "Succeeded" | "Failed"))
                && let Some(job) = p.labels().get("job-name")
            {
                tracker.running(job);
            }
        }
    });
    vec![job_watch, pod_watch]
}

async fn create(api: &Api<Job>, tracker: &Tracker, names: &[String], agent: &str) -> Result<()> {
    futures::stream::iter(names.to_vec())
        .map(|n| {
            let api = api.clone();
            let tracker = tracker.clone();
            let obj = job(&n, agent);
            async move {
                let obj = obj?;
                tracker.created(&n);
                api.create(&PostParams::default(), &obj)
                    .await
                    .map_err(anyhow::Error::from)
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    let Some(agent) = bench.args.agents.first().cloned() else {
        return Ok(());
    };
    // Either count 0 (e.g. `--jobs 0`): a Tasks-only run, with no half-empty table
    // and no ratio against nothing.
    if bench.args.jobs == 0 || bench.args.sequential_jobs == 0 {
        return Ok(());
    }
    let tracker = Tracker::default();
    let watches = watch(bench, tracker.clone());
    let api: Api<Job> = Api::namespaced(bench.client.clone(), &bench.ns);

    let mut seq = Vec::new();
    for i in 0..bench.args.sequential_jobs {
        let name = format!("job-seq-{i}");
        create(&api, &tracker, std::slice::from_ref(&name), &agent).await?;
        tracker
            .wait_all(std::slice::from_ref(&name), Duration::from_secs(120))
            .await?;
        seq.push(name);
    }
    let s = tracker.wait_all(&seq, Duration::from_secs(1)).await?;

    let names: Vec<String> = (0..bench.args.jobs).map(|i| format!("job-{i}")).collect();
    create(&api, &tracker, &names, &agent).await?;
    let b = tracker.wait_all(&names, Duration::from_secs(1800)).await?;
    for w in watches {
        w.abort();
    }
    api.delete_collection(
        &DeleteParams::background(),
        &ListParams::default().labels(&format!("{JOB_LABEL}=true")),
    )
    .await?;

    report.line(format!(
        "\n### Baseline: one `batch/v1` Job per task (`ari run` of `{agent}` in the Job's pod)\n"
    ));
    report.line("| run | Jobs | tasks/s | create → pod Running p50 / p95 / p99 | create → Complete p50 / p95 / p99 | failed |");
    report.line("|---|---|---|---|---|---|");
    report.line(format!(
        "| one at a time | {} | {:.1} | {} | {} | {} |",
        s.count,
        s.per_second(),
        s.to_running,
        s.to_finished,
        s.failed
    ));
    report.line(format!(
        "| all at once (16 creators) | {} | **{:.1}** | {} | {} | {} |",
        b.count,
        b.per_second(),
        b.to_running,
        b.to_finished,
        b.failed
    ));
    report.set_baseline(s.to_finished.p50, b.per_second());
    Ok(())
}
