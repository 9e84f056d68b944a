//! The Agent controller and the objects it keeps in sync.

pub mod controller;
pub mod deployment;
pub mod image;
pub mod key;
pub mod models;
pub mod module;
pub mod rbac;
pub mod signing;
