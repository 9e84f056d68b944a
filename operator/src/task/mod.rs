//! The Task controller: validation, deadlines, executor loss, TTL, children of ended parents.
//! Not on the hot path.

pub mod children;
pub mod controller;
pub mod conversation;
pub mod decide;
