//! What the cluster benchmarks (`src/bin/ari-bench-*`) measure the same way.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use ari_crds::{Task, TaskPhase};
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;

use crate::scenario::task_yaml;

/// p50 and p99 in milliseconds (nearest rank; sorts `v`).
pub fn percentiles(v: &mut [Duration]) -> (f64, f64) {
    v.sort();
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    (at(0.5), at(0.99))
}

/// Creates the Task and waits (on a watch) until it has finished; it must have succeeded.
/// The time from the create request to the watch event showing it finished.
pub async fn task_round_trip(
    tasks: &Api<Task>,
    name: &str,
    agent: &str,
    input: &str,
) -> Result<Duration> {
    let task: Task = serde_yaml::from_str(&task_yaml(name, agent, input, ""))?;
    let start = Instant::now();
    tasks.create(&PostParams::default(), &task).await?;
    let done = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(tasks.clone(), name, |t: Option<&Task>| {
            t.is_some_and(Task::is_finished)
        }),
    )
    .await
    .context("task timed out")??;
    let elapsed = start.elapsed();
    let phase = done.map(|t| t.phase());
    ensure!(
        phase == Some(TaskPhase::Succeeded),
        "{name} ended {phase:?}"
    );
    Ok(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_ranks_in_milliseconds() {
        let mut v: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(percentiles(&mut v), (51.0, 99.0));
        assert_eq!(percentiles(&mut []), (0.0, 0.0));
    }
}
