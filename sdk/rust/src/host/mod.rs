//! Safe wrappers for the `ainur:ari/host@2.0.0` functions, one module per capability.
//!
//! Capability-gated calls return [`crate::Error::Host`] when the capability was not granted.

pub mod clock;
pub mod crypto;
pub mod http;
pub mod log;
pub mod random;
pub mod storage;

use crate::bindings::ainur::ari::host as wit;
