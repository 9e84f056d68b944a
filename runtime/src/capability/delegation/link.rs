//! `delegate`, `start-child`, `await-child` and `send-message`: linkage, fuel and the budget
//! handed to each child, which is taken from this task's own fuel when the child starts.

use std::time::Duration;

use wasmtime::component::LinkerInstance;

use super::{ChildFailure, DelegationFailure, Share, TaskDelegation};
use crate::bindings::{self, ChildBudget, DelegationError};
use crate::capability::CapError;
use crate::capability::model::ModelCapability;
use crate::fuel_costs::FuelCost;
use crate::host::{Cx, HostFunctions, charge, check_trace, guest_result};
use crate::state::TaskState;

/// Starting a child (any of the three ways): bytes of Agent name and input. High enough that a
/// guest starting children in a tight loop pays for the host work (a Task object in a cluster).
pub const START: FuelCost = FuelCost::new(1_000_000, 2);
/// `await-child`: bytes of the output returned.
pub const AWAIT: FuelCost = FuelCost::new(10_000, 2);
/// Fuel a parent always keeps when it funds a child: enough to await it (10,000 plus 2 per byte
/// of an answer up to ~1 MiB), combine the answers and return. A child is never given the fuel
/// its parent needs to collect it: that would end the parent `FuelExhausted` at its next
/// instruction and cancel the child before it ran.
pub const PARENT_RESERVE: u64 = 4_000_000;
/// This capability's entries of the fuel table.
pub const FUEL: &[(&str, FuelCost)] = &[
    ("delegate", START),
    ("start-child", START),
    ("await-child", AWAIT),
    ("send-message", START),
];

/// This capability's host functions (its `Capability::HOST`).
pub(crate) const HOST: HostFunctions = HostFunctions {
    interface: crate::bindings::HOST_IMPORT,
    link,
    fuel: FUEL,
};

fn link(host: &mut LinkerInstance<'_, TaskState>) -> wasmtime::Result<()> {
    host.func_wrap(
        "delegate",
        |mut cx: Cx<'_>, (agent, input, budget): (String, Vec<u8>, ChildBudget)| {
            let child = match start(&mut cx, &agent, &input, budget, false)? {
                Ok(child) => child,
                Err(err) => return Ok((Err(err),)),
            };
            Ok((await_child(&mut cx, child)?,))
        },
    )?;
    host.func_wrap(
        "start-child",
        |mut cx: Cx<'_>, (agent, input, budget): (String, Vec<u8>, ChildBudget)| {
            Ok((start(&mut cx, &agent, &input, budget, false)?,))
        },
    )?;
    host.func_wrap("await-child", |mut cx: Cx<'_>, (child,): (u32,)| {
        Ok((await_child(&mut cx, child)?,))
    })?;
    host.func_wrap(
        "send-message",
        |mut cx: Cx<'_>, (agent, input, budget): (String, Vec<u8>, ChildBudget)| {
            Ok((start(&mut cx, &agent, &input, budget, true)?.map(|_| ()),))
        },
    )
}

/// Checks the grant, takes the child's fuel and time out of this task's, and starts it.
fn start(
    cx: &mut Cx<'_>,
    agent: &str,
    input: &[u8],
    budget: ChildBudget,
    message: bool,
) -> wasmtime::Result<Result<u32, DelegationError>> {
    charge(cx, START, agent.len() + input.len())?;
    let checked = {
        let mut caps = cx.data().caps();
        let checked = caps.get::<TaskDelegation>().check(agent);
        if let Err(DelegationFailure::Denied(why)) = &checked {
            caps.note_denial(why.clone());
        }
        checked
    };
    if let Err(refused) = checked {
        return to_guest(cx, Err(refused));
    }
    // A delegation the grant marks waits for a person first: the child's time is what is left
    // once it is decided.
    let approved = cx
        .data()
        .caps()
        .with(|d: &mut TaskDelegation, rec| d.approve(agent, input, rec));
    match approved {
        Ok(()) => {}
        Err(DelegationFailure::Host(CapError::DeadlineExceeded)) => {
            check_trace(cx)?;
            return Err(wasmtime::Trap::Interrupt.into());
        }
        Err(DelegationFailure::Host(CapError::Cancelled)) => {
            return Err(crate::cancel::Cancelled.into());
        }
        Err(other) => return to_guest(cx, Err(other)),
    }
    // Without fuel metering (a benchmark switch) the child gets what its own Agent allows.
    let left = cx.get_fuel().ok();
    let fuel = match child_fuel(budget.fuel, left) {
        Ok(fuel) => fuel,
        Err(why) => return to_guest(cx, Err(DelegationFailure::BudgetExhausted(why))),
    };
    let time_left = cx.data().caps().get::<TaskDelegation>().time_left();
    let asked = budget.timeout_millis.map(Duration::from_millis);
    let timeout = match (asked, time_left) {
        (Some(a), Some(t)) => a.min(t),
        (Some(a), None) => a,
        (None, Some(t)) => t,
        (None, None) => Duration::MAX,
    };
    if timeout.is_zero() {
        let why = "this task has no time left to fund a child".to_owned();
        return to_guest(cx, Err(DelegationFailure::BudgetExhausted(why)));
    }
    let started = {
        let mut caps = cx.data().caps();
        let tokens = caps.get::<ModelCapability>().child_share();
        let share = Share {
            fuel,
            tokens,
            timeout,
        };
        let started =
            caps.with(|d: &mut TaskDelegation, rec| d.start(agent, input, share, message, rec));
        if started.is_ok() {
            caps.get::<ModelCapability>().reserve(tokens);
        }
        started
    };
    if started.is_ok()
        && let Some(left) = left
    {
        cx.set_fuel(left.saturating_sub(fuel))?;
    }
    to_guest(cx, started)
}

/// The fuel a child gets out of `left` (`None`: fuel is not metered): what the guest `asked`,
/// or half of what the parent can spare; never [`PARENT_RESERVE`] of it. An ask the parent
/// cannot afford is refused whole (`budget-exhausted`), never cut down to something the guest
/// did not ask for.
pub fn child_fuel(asked: Option<u64>, left: Option<u64>) -> Result<u64, String> {
    let Some(left) = left else {
        return Ok(asked.unwrap_or(u64::MAX));
    };
    let spare = left.saturating_sub(PARENT_RESERVE);
    let fuel = asked.unwrap_or(spare / 2);
    if fuel == 0 || fuel > spare {
        let asked = asked.map_or_else(|| "half of what it can spare".to_owned(), |a| a.to_string());
        return Err(format!(
            "not enough fuel for this child: asked {asked}; this task has {left} left and keeps \
             {PARENT_RESERVE} to await its children and finish, so it can give at most {spare}"
        ));
    }
    Ok(fuel)
}

/// Waits for a child and gives back the fuel it did not use.
fn await_child(cx: &mut Cx<'_>, child: u32) -> wasmtime::Result<Result<Vec<u8>, DelegationError>> {
    let awaited = cx
        .data()
        .caps()
        .with(|d: &mut TaskDelegation, rec| d.await_child(child, rec));
    let result = match awaited {
        Ok((result, settled)) => {
            if let Ok(left) = cx.get_fuel() {
                cx.set_fuel(left.saturating_add(settled.reserved - settled.used))?;
            }
            cx.data()
                .caps()
                .get::<ModelCapability>()
                .refund(settled.reserved_tokens - settled.used_tokens);
            result.map_err(DelegationFailure::Failed)
        }
        Err(failure) => Err(failure),
    };
    let result = to_guest(cx, result)?;
    if let Ok(output) = &result {
        charge(cx, AWAIT, output.len())?;
    }
    Ok(result)
}

/// A delegation result as the guest sees it; host failures are remembered for classification.
fn to_guest<T>(
    cx: &mut Cx<'_>,
    result: Result<T, DelegationFailure>,
) -> wasmtime::Result<Result<T, DelegationError>> {
    match result {
        Err(DelegationFailure::Host(err)) => guest_result(cx, Err(err), |e| {
            DelegationError::Unavailable(e.to_string())
        }),
        other => {
            check_trace(cx)?;
            Ok(other.map_err(delegation_error))
        }
    }
}

fn delegation_error(failure: DelegationFailure) -> DelegationError {
    match failure {
        DelegationFailure::Denied(m) => DelegationError::Denied(m),
        DelegationFailure::LimitReached(m) => DelegationError::LimitReached(m),
        DelegationFailure::Unavailable(m) => DelegationError::Unavailable(m),
        DelegationFailure::BudgetExhausted(m) => DelegationError::BudgetExhausted(m),
        DelegationFailure::Failed(ChildFailure { reason, message }) => {
            DelegationError::Failed(bindings::ChildFailure { reason, message })
        }
        DelegationFailure::InvalidHandle(m) => DelegationError::InvalidHandle(m),
        // Nothing ran; the message says who rejected it and why.
        DelegationFailure::Rejected(m) => DelegationError::Rejected(m),
        DelegationFailure::Host(e) => DelegationError::Unavailable(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_gets_its_ask_or_half_the_spare_and_never_the_parents_reserve() {
        const R: u64 = PARENT_RESERVE;
        // (asked, left) → fuel, or refused.
        let cases: &[(Option<u64>, Option<u64>, Option<u64>)] = &[
            (Some(10), Some(R + 10), Some(10)),
            (Some(11), Some(R + 10), None),
            (None, Some(R + 10), Some(5)),
            (None, Some(R + 1), None),
            (None, Some(R), None),
            (Some(1), Some(0), None),
            (Some(0), Some(u64::MAX), None),
            // Fan-out: three children asking 50 M each of a 50 M budget.
            (Some(50_000_000), Some(50_000_000), None),
            (Some(50_000_000), Some(200_000_000), Some(50_000_000)),
            // Not metered: the ask, or what the child's Agent allows.
            (Some(7), None, Some(7)),
            (None, None, Some(u64::MAX)),
        ];
        for &(asked, left, want) in cases {
            let got = child_fuel(asked, left);
            assert_eq!(
                got.as_ref().ok().copied(),
                want,
                "{asked:?} of {left:?}: {got:?}"
            );
            if let Err(why) = got {
                assert!(why.contains("keeps"), "{why}");
            }
        }
    }
}
