//! The namespace user as attacker: someone with `create` on Agents, Tasks and Plans in one namespace
//! (and, where a trial says so, on Secrets) tries each attack of docs/security.md's tenant table
//! on a real control plane. Every trial asserts the attack failed *and* that the operator and
//! executors still serve other namespaces.
//! Run: `cargo build --bins && cargo test -p ari-e2e --test tenant`.

use ari_e2e::{namespace_user, trials};

mod delegation_attacks;
mod gateway_attacks;
mod live_log_attacks;
mod operator_attacks;
mod plan_attacks;
mod pool_attacks;
mod registry_attacks;
mod worker_attacks;

fn main() -> std::process::ExitCode {
    // Each attack family lives in its own module; add its trials here.
    let mut all = Vec::new();
    all.extend(operator_attacks::trials());
    all.extend(worker_attacks::trials());
    all.extend(delegation_attacks::trials());
    all.extend(gateway_attacks::trials());
    all.extend(live_log_attacks::trials());
    all.extend(plan_attacks::trials());
    all.extend(pool_attacks::trials());
    // Last, alone: it reconfigures the operator (an insecure registry) and measures its memory.
    trials::run_phases(
        ari_e2e::scenario::Ctx::start_with_operator,
        vec![all, registry_attacks::trials()],
    )
}
