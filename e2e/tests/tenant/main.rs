//! The namespace user as attacker: someone with `create` on Agents and Tasks in one namespace
//! (and, where a trial says so, on Secrets) tries each attack of docs/security.md's tenant table
//! on a real control plane. Every trial asserts the attack failed *and* that the operator and
//! executors still serve other namespaces.
//! Run: `cargo build --bins && cargo test -p ari-e2e --test tenant`.

use ari_e2e::trials;

mod worker_attacks;

fn main() -> std::process::ExitCode {
    // Each attack family lives in its own module; add its trials here.
    trials::run(vec![
        (
            "stale_executor_cannot_overwrite_a_failed_task",
            worker_attacks::stale_executor_cannot_overwrite_a_failed_task,
        ),
        (
            "output_that_cannot_be_stored_ends_the_task",
            worker_attacks::output_that_cannot_be_stored_ends_the_task,
        ),
        (
            "task_cannot_read_unmarked_configmaps",
            worker_attacks::task_cannot_read_unmarked_configmaps,
        ),
    ])
}
