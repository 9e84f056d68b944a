//! The storage commit gate's question, "is this Task still my attempt?", asked patiently.
//!
//! The gate runs just before a run's storage commit. An API server that is restarting or briefly
//! unreachable is not an answer: failing the Task for it would turn a transient outage into a
//! terminal `HostError` (seen in the fault soak when kube-apiserver restarted mid-run). So the
//! question is retried with backoff for a while; only a definite answer (the Task is gone, or is
//! no longer this attempt) or running out of patience ends it, and then the attempt is abandoned:
//! nothing is committed or written, and the operator requeues the Task when its heartbeat
//! stops, so it runs again rather than failing.

use std::time::{Duration, Instant};

use ari_crds::Task;

use super::status::{is_not_found, owned_by};

/// How long the gate keeps asking an API server that does not answer.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// What the gate decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The Task is still this attempt: commit.
    Owned,
    /// Not ours any more, or unknowable: commit nothing, write nothing.
    Abandon(String),
}

/// Who is asking, and how long to keep trying.
pub struct Asker<'a> {
    pub uid: &'a str,
    pub pod: &'a str,
    pub attempt: u32,
    pub patience: Duration,
    /// First pause between tries; doubles up to 2 s.
    pub first_pause: Duration,
}

impl Asker<'_> {
    /// Asks `fetch` until it answers definitely or patience runs out.
    pub fn confirm(&self, mut fetch: impl FnMut() -> Result<Task, kube::Error>) -> Verdict {
        let give_up = Instant::now() + self.patience;
        let mut pause = self.first_pause;
        loop {
            match fetch() {
                Ok(task) => {
                    return match owned_by(&task, self.uid, self.pod, self.attempt) {
                        Ok(()) => Verdict::Owned,
                        Err(not_ours) => Verdict::Abandon(not_ours.to_string()),
                    };
                }
                Err(e) if is_not_found(&e) => {
                    return Verdict::Abandon("the Task was deleted".into());
                }
                Err(e) if Instant::now() + pause >= give_up => {
                    return Verdict::Abandon(format!(
                        "cannot confirm this executor still owns the Task after {}s: {e}",
                        self.patience.as_secs()
                    ));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "commit gate: API not answering; asking again");
                    // Backoff between retries of a failed request, not synchronisation.
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(uid: &str, pod: &str) -> Task {
        let mut task: Task = serde_json::from_value(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "t", "namespace": "ns", "uid": uid},
            "spec": {"agentRef": {"name": "a"}, "input": "x"},
        }))
        .unwrap_or_else(|e| panic!("task: {e}"));
        let mut status = ari_crds::TaskStatus::default();
        status
            .claim(pod, None, super::super::convert::now())
            .unwrap_or_else(|e| panic!("claim: {e}"));
        task.status = Some(status);
        task
    }

    fn unavailable() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("etcdserver: leader changed", "ServiceUnavailable")
                .with_code(503)
                .boxed(),
        )
    }

    fn not_found() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("tasks \"t\" not found", "NotFound")
                .with_code(404)
                .boxed(),
        )
    }

    fn asker(patience: Duration) -> Asker<'static> {
        Asker {
            uid: "u1",
            pod: "pod-a",
            attempt: 1,
            patience,
            first_pause: Duration::ZERO,
        }
    }

    #[test]
    fn an_api_server_that_is_briefly_down_is_asked_again_and_the_commit_goes_ahead() {
        let mut answers = vec![Err(unavailable()), Err(unavailable())].into_iter();
        let mut calls = 0;
        let verdict = asker(Duration::from_secs(60)).confirm(|| {
            calls += 1;
            answers.next().unwrap_or_else(|| Ok(running("u1", "pod-a")))
        });
        assert_eq!(verdict, Verdict::Owned);
        assert_eq!(calls, 3);
    }

    #[test]
    fn an_api_server_that_never_answers_abandons_the_attempt_instead_of_failing_the_task() {
        let verdict = asker(Duration::ZERO).confirm(|| Err(unavailable()));
        assert!(
            matches!(&verdict, Verdict::Abandon(m) if m.contains("cannot confirm")),
            "{verdict:?}"
        );
    }

    #[test]
    fn a_deleted_or_reowned_task_is_not_committed_for() {
        let verdict = asker(Duration::from_secs(60)).confirm(|| Err(not_found()));
        assert_eq!(verdict, Verdict::Abandon("the Task was deleted".into()));
        let verdict = asker(Duration::from_secs(60)).confirm(|| Ok(running("u1", "pod-b")));
        assert!(matches!(verdict, Verdict::Abandon(_)), "{verdict:?}");
        let verdict = asker(Duration::from_secs(60)).confirm(|| Ok(running("u2", "pod-a")));
        assert!(matches!(verdict, Verdict::Abandon(_)), "{verdict:?}");
    }
}
