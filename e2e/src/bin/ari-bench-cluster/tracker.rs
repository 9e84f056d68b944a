//! When each object was created and when a watch first showed it running and finished.
//!
//! One watch per namespace feeds the tracker; latencies are measured from the instant just
//! before the create request was sent to the instant the watch delivered the state, which is
//! what a `kubectl apply` user waiting on the object sees.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    created: Option<Instant>,
    running: Option<Instant>,
    finished: Option<(Instant, bool)>,
}

/// Shared between the watch task(s) and the code that creates objects.
#[derive(Clone, Default)]
pub struct Tracker(Arc<Mutex<HashMap<String, Seen>>>);

/// Latency and throughput of one batch.
#[derive(Debug, Clone)]
pub struct Figures {
    pub count: usize,
    pub failed: usize,
    pub to_running: Percentiles,
    pub to_finished: Percentiles,
    /// From the first create sent to the last finish seen.
    pub elapsed: Duration,
}

impl Figures {
    pub fn per_second(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// p50/p95/p99/max in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(mut ms: Vec<f64>) -> Self {
        if ms.is_empty() {
            return Self::default();
        }
        ms.sort_by(f64::total_cmp);
        let at = |p: f64| ms[((ms.len() as f64 - 1.0) * p).round() as usize];
        Self {
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

impl std::fmt::Display for Percentiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.0} / {:.0} / {:.0} ms", self.p50, self.p95, self.p99)
    }
}

impl Tracker {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Seen>) -> T) -> T {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut map)
    }

    /// Call just before sending the create request.
    pub fn created(&self, name: &str) {
        let now = Instant::now();
        self.with(|m| m.entry(name.to_owned()).or_default().created = Some(now));
    }

    pub fn running(&self, name: &str) {
        let now = Instant::now();
        self.with(|m| {
            let s = m.entry(name.to_owned()).or_default();
            s.running.get_or_insert(now);
        });
    }

    pub fn finished(&self, name: &str, ok: bool) {
        let now = Instant::now();
        self.with(|m| {
            let s = m.entry(name.to_owned()).or_default();
            s.finished.get_or_insert((now, ok));
            // A task can finish before any watch event showed it running (the claim and the
            // final write landed between two deliveries): it ran no later than it finished.
            s.running.get_or_insert(now);
        });
    }

    /// How many of `names` have finished so far.
    pub fn finished_of(&self, names: &[String]) -> usize {
        self.with(|m| {
            names
                .iter()
                .filter(|n| m.get(*n).is_some_and(|s| s.finished.is_some()))
                .count()
        })
    }

    /// Waits until every name finished (polling every 20 ms), then computes the figures.
    pub async fn wait_all(&self, names: &[String], timeout: Duration) -> Result<Figures> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = self.with(|m| {
                names
                    .iter()
                    .filter(|n| m.get(*n).is_none_or(|s| s.finished.is_none()))
                    .count()
            });
            if left == 0 {
                break;
            }
            if Instant::now() > deadline {
                bail!("{left} of {} not finished after {timeout:?}", names.len());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(self.with(|m| {
            let rows: Vec<Seen> = names.iter().filter_map(|n| m.get(n).copied()).collect();
            let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
            let first = rows.iter().filter_map(|s| s.created).min();
            let last = rows.iter().filter_map(|s| s.finished.map(|f| f.0)).max();
            Figures {
                count: rows.len(),
                failed: rows
                    .iter()
                    .filter(|s| s.finished.is_some_and(|f| !f.1))
                    .count(),
                to_running: Percentiles::of(
                    rows.iter()
                        .filter_map(|s| Some(ms(s.created?, s.running?)))
                        .collect(),
                ),
                to_finished: Percentiles::of(
                    rows.iter()
                        .filter_map(|s| Some(ms(s.created?, s.finished?.0)))
                        .collect(),
                ),
                elapsed: match (first, last) {
                    (Some(a), Some(b)) => b.saturating_duration_since(a),
                    _ => Duration::ZERO,
                },
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_ranks() {
        let p = Percentiles::of((1..=100).map(f64::from).collect());
        assert_eq!((p.p50, p.p95, p.p99, p.max), (51.0, 95.0, 99.0, 100.0));
        assert_eq!(Percentiles::of(vec![]).max, 0.0);
    }

    #[tokio::test]
    async fn finished_implies_running_and_failures_count() {
        let t = Tracker::default();
        for n in ["a", "b"] {
            t.created(n);
        }
        t.running("a");
        t.finished("a", true);
        t.finished("b", false);
        let f = t
            .wait_all(&["a".into(), "b".into()], Duration::from_secs(1))
            .await
            .expect("both finished");
        assert_eq!((f.count, f.failed), (2, 1));
        assert!(f.to_running.max <= f.to_finished.max);
    }
}
