//! Calling other Agents (capability `delegation`): wait for one, fan out to several and collect
//! them, or send a one-way message. A child's fuel and time come out of this task's: by default
//! half of the fuel it can spare (it keeps a reserve to await and finish), and the time left.

use super::wit;
use crate::Error;
use crate::bindings::ainur::ari::types::ChildBudget;

/// What a child may spend, out of what this task has left (`None`: the default share).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    pub fuel: Option<u64>,
    pub timeout_millis: Option<u64>,
}

impl Budget {
    /// At most `fuel` units of this task's fuel.
    pub fn fuel(fuel: u64) -> Self {
        Self {
            fuel: Some(fuel),
            timeout_millis: None,
        }
    }
}

impl From<Budget> for ChildBudget {
    fn from(b: Budget) -> Self {
        ChildBudget {
            fuel: b.fuel,
            timeout_millis: b.timeout_millis,
        }
    }
}

/// Runs a task on `agent` with `input` and waits for its output.
pub fn delegate(agent: &str, input: &[u8]) -> Result<Vec<u8>, Error> {
    delegate_with(agent, input, Budget::default())
}

/// [`delegate`] with an explicit budget.
pub fn delegate_with(agent: &str, input: &[u8], budget: Budget) -> Result<Vec<u8>, Error> {
    wit::delegate(agent, input, budget.into()).map_err(Error::from)
}

/// A child started with [`start`]; collect it with [`Child::wait`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a child not awaited is cancelled when the task ends"]
pub struct Child(u32);

/// Starts a task on `agent` and returns at once, so several children run in parallel.
pub fn start(agent: &str, input: &[u8], budget: Budget) -> Result<Child, Error> {
    wit::start_child(agent, input, budget.into())
        .map(Child)
        .map_err(Error::from)
}

impl Child {
    /// Waits for the child's output.
    pub fn wait(self) -> Result<Vec<u8>, Error> {
        wit::await_child(self.0).map_err(Error::from)
    }
}

/// Starts a task on `agent` that this task never waits for; its whole budget is spent.
pub fn send_message(agent: &str, input: &[u8], budget: Budget) -> Result<(), Error> {
    wit::send_message(agent, input, budget.into()).map_err(Error::from)
}
