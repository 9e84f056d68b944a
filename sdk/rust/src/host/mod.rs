//! Safe wrappers for the `ainur:ari/host@2.0.0` functions, one module per capability.
//!
//! Capability-gated calls return [`crate::Error::Denied`] when the capability was not granted;
//! the host never traps for it.

pub mod clock;
pub mod crypto;
pub mod delegation;
pub mod http;
pub mod log;
pub mod random;
pub mod storage;

use crate::bindings::ainur::ari::host as wit;
