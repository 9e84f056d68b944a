//! The ari operator.
fn main() {}
