//! Prometheus metrics of the operator, registered once in a private registry.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// All operator metrics. Cheap to clone handles; shared through `Arc<Metrics>`.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Reconciles by controller (`agent`, `task`).
    pub reconciles: IntCounterVec,
    /// Reconcile errors by controller and kind (`Error::metric_label`).
    pub reconcile_errors: IntCounterVec,
    /// Wall time of each reconcile, success or error, by controller.
    pub reconcile_duration: HistogramVec,
    /// Tasks observed by phase and reason (reason empty while not finished).
    pub tasks: IntGaugeVec,
    /// Finished task transitions the operator observed, by phase and reason.
    pub task_finished: IntCounterVec,
    /// Wall time of finished tasks (seconds), by reason.
    pub task_duration: HistogramVec,
    /// Fuel used by finished tasks, by agent.
    pub fuel_used: IntCounterVec,
    /// Watched objects skipped because they do not decode, by kind.
    pub decode_skipped: IntCounterVec,
}

impl Metrics {
    /// Counts an object a watch skipped (`ari_crds::decode::watch`) under its kind.
    pub fn count_skipped(&self) -> impl Fn(&str) + Send + 'static + use<> {
        let skipped = self.decode_skipped.clone();
        move |kind| skipped.with_label_values(&[kind]).inc()
    }

    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("ari_operator".into()), None)?;
        let reconciles = IntCounterVec::new(
            Opts::new("reconciles_total", "Reconciles run"),
            &["controller"],
        )?;
        let reconcile_errors = IntCounterVec::new(
            Opts::new("reconcile_errors_total", "Reconciles that failed, by kind"),
            &["controller", "error"],
        )?;
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new("reconcile_duration_seconds", "Wall time of one reconcile").buckets(
                vec![
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
                ],
            ),
            &["controller"],
        )?;
        let tasks = IntGaugeVec::new(
            Opts::new("tasks", "Tasks by phase and reason at the last reconcile"),
            &["phase", "reason"],
        )?;
        let task_finished = IntCounterVec::new(
            Opts::new(
                "tasks_finished_total",
                "Finished tasks seen, by phase and reason",
            ),
            &["phase", "reason"],
        )?;
        let task_duration = HistogramVec::new(
            HistogramOpts::new("task_duration_seconds", "Wall time of finished tasks").buckets(
                vec![
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    300.0,
                ],
            ),
            &["reason"],
        )?;
        let fuel_used = IntCounterVec::new(
            Opts::new("task_fuel_used_total", "Fuel used by finished tasks"),
            &["agent"],
        )?;
        let decode_skipped = IntCounterVec::new(
            Opts::new(
                "objects_skipped_total",
                "Watched objects skipped because they do not decode",
            ),
            &["kind"],
        )?;
        registry.register(Box::new(decode_skipped.clone()))?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(tasks.clone()))?;
        registry.register(Box::new(task_finished.clone()))?;
        registry.register(Box::new(task_duration.clone()))?;
        registry.register(Box::new(fuel_used.clone()))?;
        Ok(Self {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            tasks,
            task_finished,
            task_duration,
            fuel_used,
            decode_skipped,
        })
    }

    /// The text exposition format served on `/metrics`.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        if TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_exposes_registered_series() -> Result<(), prometheus::Error> {
        let m = Metrics::new()?;
        m.reconciles.with_label_values(&["agent"]).inc();
        m.task_duration
            .with_label_values(&["Completed"])
            .observe(0.02);
        let text = m.render();
        assert!(
            text.contains("ari_operator_reconciles_total{controller=\"agent\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("ari_operator_task_duration_seconds_bucket"),
            "{text}"
        );
        Ok(())
    }
}
