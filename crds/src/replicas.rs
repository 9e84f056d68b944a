//! N-way verification (`spec.verification.replicas`): what each replica records, whose turn
//! the next replica is, and what the replicas' runs add up to. Pure functions; the executor
//! applies them in its final write (docs/verification.md, "N-way verification").

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::task::{Task, TaskPhase, TaskReason, TaskSpec};

/// Most replicas a Task may ask for: each one is a whole run, one after another.
pub const MAX_REPLICAS: u32 = 5;

/// `spec.verification`: run the Task several times and compare.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verification {
    /// How many runs are compared; 1 is a single run, as without verification.
    #[schemars(range(min = 1, max = 5))]
    pub replicas: u32,
}

/// One replica's run, as `status.replicas` lists it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRecord {
    /// Pod name of the executor that ran it.
    pub executor: String,
    /// How the run ended on its own (`Succeeded` or `Failed`).
    pub phase: TaskPhase,
    pub reason: TaskReason,
    /// Hex SHA-256 of the output bytes (compared).
    pub output_sha256: String,
    /// Hex SHA-256 of the host-call trace (compared).
    pub trace_sha256: String,
    /// The replica's attestation digest, as a parent lists a child's (not compared: it names
    /// the executor and its timings).
    pub attestation_sha256: String,
    /// Fuel this replica used (each replica is a whole run's cost).
    pub fuel: u64,
}

impl ReplicaRecord {
    /// What replicas must agree on: the ending, the output and the trace.
    fn key(&self) -> (TaskReason, &str, &str) {
        (self.reason, &self.output_sha256, &self.trace_sha256)
    }
}

impl TaskSpec {
    /// Runs compared (1 without `spec.verification`).
    pub fn replicas(&self) -> u32 {
        self.verification
            .map_or(1, |v| v.replicas.clamp(1, MAX_REPLICAS))
    }
}

impl Task {
    /// The replicas recorded so far.
    pub fn replicas_run(&self) -> &[ReplicaRecord] {
        self.status.as_ref().map_or(&[], |s| s.replicas.as_slice())
    }

    /// Claims that were not replicas finishing: the first run and the re-runs after executor
    /// loss. `spec.retries` bounds these, never the replicas asked for.
    pub fn attempts_against_retries(&self) -> u32 {
        let replicas = u32::try_from(self.replicas_run().len()).unwrap_or(u32::MAX);
        self.attempts().saturating_sub(replicas)
    }
}

/// Whether the executor `me` may claim the next replica of a Task whose replicas so far are
/// `ran`, with `ready` the Agent's Ready executors (`me` among them or not). Every executor
/// runs one before any runs two: `me` waits while a Ready peer has run fewer than it has.
pub fn may_run_next(ran: &[ReplicaRecord], me: &str, ready: &BTreeSet<String>) -> bool {
    let runs = |pod: &str| ran.iter().filter(|r| r.executor == pod).count();
    let mine = runs(me);
    ready.iter().all(|p| runs(p) >= mine)
}

/// What a finished replica means for its Task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It ends the Task as a single run would: not a verified Task, an ending that belongs to
    /// the Task rather than to the run (cancelled, deadline, host error), or a first replica
    /// that failed (a failure is not worth N runs).
    Ends,
    /// All agree so far and more replicas are wanted: record it, back to Pending.
    Next,
    /// The last replica; all agree. The message names the executors.
    Verified(String),
    /// Some disagree. The message names the executors on each side.
    Mismatch(String),
}

/// Endings a run reaches by itself from its inputs, so honest replicas reach the same one.
fn compared(reason: TaskReason) -> bool {
    matches!(
        reason,
        TaskReason::Completed
            | TaskReason::Trap
            | TaskReason::FuelExhausted
            | TaskReason::OutputTooLarge
            | TaskReason::AgentError
    )
}

/// The verdict on replica `this` after `earlier` ones, when `wanted` are asked for.
pub fn verdict(wanted: u32, earlier: &[ReplicaRecord], this: &ReplicaRecord) -> Verdict {
    if wanted <= 1 || !compared(this.reason) {
        return Verdict::Ends;
    }
    if earlier.is_empty() && this.reason != TaskReason::Completed {
        return Verdict::Ends;
    }
    let all: Vec<&ReplicaRecord> = earlier.iter().chain([this]).collect();
    if all.iter().any(|r| r.key() != this.key()) {
        return Verdict::Mismatch(disagreement(&all));
    }
    if all.len() < usize::try_from(wanted).unwrap_or(usize::MAX) {
        return Verdict::Next;
    }
    let executors: Vec<&str> = all.iter().map(|r| r.executor.as_str()).collect();
    Verdict::Verified(format!(
        "{} replicas agree ({}): {}",
        all.len(),
        executors.join(", "),
        describe(this)
    ))
}

/// `[exec-a (replica 1), exec-c (replica 3)] Completed, output 1a2b3c4d5e6f, trace …; [exec-b
/// (replica 2)] …`: each group of agreeing replicas, in order of first appearance.
fn disagreement(all: &[&ReplicaRecord]) -> String {
    let mut groups: Vec<(&ReplicaRecord, Vec<String>)> = Vec::new();
    for (i, r) in all.iter().enumerate() {
        let who = format!("{} (replica {})", r.executor, i + 1);
        match groups.iter_mut().find(|(first, _)| first.key() == r.key()) {
            Some((_, names)) => names.push(who),
            None => groups.push((r, vec![who])),
        }
    }
    let sides: Vec<String> = groups
        .iter()
        .map(|(r, names)| format!("[{}] {}", names.join(", "), describe(r)))
        .collect();
    format!("replicas disagree: {}", sides.join("; "))
}

fn describe(r: &ReplicaRecord) -> String {
    format!(
        "{}, output {}, trace {}",
        r.reason.as_str(),
        short(&r.output_sha256),
        short(&r.trace_sha256)
    )
}

/// The first 12 hex digits of a digest, enough to tell runs apart in a message.
fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(executor: &str, reason: TaskReason, output: &str, trace: &str) -> ReplicaRecord {
        ReplicaRecord {
            executor: executor.into(),
            phase: if reason == TaskReason::Completed {
                TaskPhase::Succeeded
            } else {
                TaskPhase::Failed
            },
            reason,
            output_sha256: output.into(),
            trace_sha256: trace.into(),
            attestation_sha256: format!("att-{executor}"),
            fuel: 10,
        }
    }

    fn ok(executor: &str) -> ReplicaRecord {
        run(executor, TaskReason::Completed, "out", "trace")
    }

    #[test]
    fn verdicts_follow_the_replicas_endings_and_digests() {
        use TaskReason::*;
        // (name, replicas wanted, earlier replicas, this one, verdict)
        type Case = (
            &'static str,
            u32,
            Vec<ReplicaRecord>,
            ReplicaRecord,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            ("a single run ends as it ended", 1, vec![], ok("a"), "Ends"),
            (
                "a first agreeing replica asks for the next",
                2,
                vec![],
                ok("a"),
                "Next",
            ),
            (
                "the last agreeing replica verifies",
                2,
                vec![ok("a")],
                ok("b"),
                "Verified",
            ),
            (
                "agreement so far with more wanted asks for the next",
                3,
                vec![ok("a")],
                ok("b"),
                "Next",
            ),
            (
                "another output is a mismatch",
                2,
                vec![ok("a")],
                run("b", Completed, "other", "trace"),
                "Mismatch",
            ),
            (
                "another trace is a mismatch",
                2,
                vec![ok("a")],
                run("b", Completed, "out", "other"),
                "Mismatch",
            ),
            (
                "another ending is a mismatch",
                2,
                vec![ok("a")],
                run("b", Trap, "", "trace"),
                "Mismatch",
            ),
            (
                "a mismatch is found before all replicas ran",
                3,
                vec![ok("a")],
                run("b", Completed, "x", "trace"),
                "Mismatch",
            ),
            (
                "a first replica that fails ends the task",
                3,
                vec![],
                run("a", Trap, "", "t"),
                "Ends",
            ),
            (
                "a cancelled replica ends the task",
                2,
                vec![ok("a")],
                run("b", Cancelled, "", ""),
                "Ends",
            ),
            (
                "a deadline ends the task",
                2,
                vec![ok("a")],
                run("b", DeadlineExceeded, "", ""),
                "Ends",
            ),
            (
                "a host error ends the task",
                2,
                vec![ok("a")],
                run("b", HostError, "", ""),
                "Ends",
            ),
        ];
        for (name, wanted, earlier, this, want) in cases {
            let got = match verdict(wanted, &earlier, &this) {
                Verdict::Ends => "Ends",
                Verdict::Next => "Next",
                Verdict::Verified(_) => "Verified",
                Verdict::Mismatch(_) => "Mismatch",
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_mismatch_names_the_executors_on_each_side() {
        let other = run("exec-b", TaskReason::Completed, "bbbbbbbbbbbbbbbb", "trace");
        let Verdict::Mismatch(message) = verdict(3, &[ok("exec-a"), other], &ok("exec-c")) else {
            panic!("expected a mismatch");
        };
        assert_eq!(
            message,
            "replicas disagree: [exec-a (replica 1), exec-c (replica 3)] Completed, output out, \
             trace trace; [exec-b (replica 2)] Completed, output bbbbbbbbbbbb, trace trace"
        );
    }

    #[test]
    fn a_verified_message_names_every_executor() {
        let Verdict::Verified(message) = verdict(2, &[ok("exec-a")], &ok("exec-b")) else {
            panic!("expected verified");
        };
        assert!(
            message.starts_with("2 replicas agree (exec-a, exec-b)"),
            "{message}"
        );
    }

    fn ready(pods: &[&str]) -> BTreeSet<String> {
        pods.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn an_executor_runs_a_second_replica_only_when_no_ready_peer_has_run_fewer() {
        // (name, replicas so far, me, ready executors, may run)
        type Case = (
            &'static str,
            Vec<ReplicaRecord>,
            &'static str,
            BTreeSet<String>,
            bool,
        );
        let cases: Vec<Case> = vec![
            (
                "anyone takes the first replica",
                vec![],
                "a",
                ready(&["a", "b"]),
                true,
            ),
            (
                "a peer that has not run takes the next",
                vec![ok("a")],
                "b",
                ready(&["a", "b"]),
                true,
            ),
            (
                "the executor that ran waits for a peer that has not",
                vec![ok("a")],
                "a",
                ready(&["a", "b"]),
                false,
            ),
            (
                "alone, the same executor runs again",
                vec![ok("a")],
                "a",
                ready(&["a"]),
                true,
            ),
            (
                "a peer that is not ready does not hold the turn",
                vec![ok("a")],
                "a",
                ready(&["a"]),
                true,
            ),
            (
                "with every peer run once, anyone runs again",
                vec![ok("a"), ok("b")],
                "a",
                ready(&["a", "b"]),
                true,
            ),
            (
                "two runs wait for a peer with one",
                vec![ok("a"), ok("b"), ok("a")],
                "a",
                ready(&["a", "b"]),
                false,
            ),
            (
                "a new peer takes its turn first",
                vec![ok("a"), ok("b")],
                "a",
                ready(&["a", "b", "c"]),
                false,
            ),
        ];
        for (name, ran, me, ready, want) in cases {
            assert_eq!(may_run_next(&ran, me, &ready), want, "{name}");
        }
    }

    #[test]
    fn replicas_default_to_one_and_are_clamped() {
        let mut spec = TaskSpec::for_agent("a");
        assert_eq!(spec.replicas(), 1);
        spec.verification = Some(Verification { replicas: 9 });
        assert_eq!(spec.replicas(), MAX_REPLICAS);
        spec.verification = Some(Verification { replicas: 0 });
        assert_eq!(spec.replicas(), 1);
    }
}
