//! End-to-end harness: a real control plane, a node agent, and scenarios.
