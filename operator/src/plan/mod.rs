//! The Plan controller: validates a Plan (or its planner's proposal) before anything runs, then
//! runs each step as a Task owned by the Plan, in dependency order and within its limits.

pub mod controller;
pub mod decide;
pub mod history;
pub mod observe;

#[cfg(test)]
mod decide_tests;
#[cfg(test)]
mod reconcile_tests;
