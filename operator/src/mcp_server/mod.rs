//! The MCPServer controller: lists a declared server's tools into its status.

pub mod controller;
pub mod decide;
