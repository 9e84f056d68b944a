//! The Agent controller and the objects it keeps in sync.

pub mod controller;
pub mod declarative;
pub mod deployment;
pub mod granted;
pub mod image;
pub mod key;
pub mod lookup;
pub mod models;
pub mod module;
pub mod rbac;
pub mod signing;
pub mod tools;
