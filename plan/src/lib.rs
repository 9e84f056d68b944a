//! ari Plans without Kubernetes: a graph of steps, each one Task of an Agent, whose inputs may
//! be earlier steps' outputs.
//!
//! A planner (any Agent) only *proposes* a plan: its output is a [`Proposal`]. Whether the
//! proposal is admissible is decided here, deterministically, by [`validate`], from plain data
//! about the Agents ([`AgentView`]); nothing in this crate touches a cluster. The operator and
//! `ari plan validate` call the same function, so a proposal is judged the same way in both.

pub mod agents;
pub mod bounds;
pub mod graph;
pub mod input;
pub mod model;
pub mod names;
pub mod schema;
pub mod validate;

pub use agents::{AgentMode, AgentView, Agents};
pub use ari_model::{CapabilityName, TaskRequirements};
pub use bounds::{MAX_PROPOSAL_BYTES, Unreadable, parse_proposal};
pub use input::{InputError, compose_input};
pub use model::{AgentRef, InputRef, Limits, PLANNER_STEP, Proposal, RetryPolicy, Step};
pub use validate::{Context, Rule, Violation, validate, validate_planner};

#[cfg(test)]
mod validate_tests;
