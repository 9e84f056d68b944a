//! The ModelConfig controller: whether a namespace's model endpoint answers, and the models it
//! offers, in status.

pub mod controller;
pub mod decide;
