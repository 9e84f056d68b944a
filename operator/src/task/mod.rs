//! The Task controller: validation, deadlines, executor loss, TTL. Not on the hot path.

pub mod controller;
pub mod decide;
