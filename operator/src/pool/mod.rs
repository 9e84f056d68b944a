//! The ExecutorPool controller: a namespace's shared executor pods (issue 29).

pub mod controller;
pub mod grants;
pub mod secrets;
