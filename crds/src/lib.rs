//! Agent and Task custom resources.
