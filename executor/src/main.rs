//! `ari`: run, verify and inspect agent components, and `ari worker`, the executor that runs an
//! Agent's Tasks in a cluster. The runtime itself is the `ari-runtime` crate.

mod cli;
mod worker;

fn main() -> std::process::ExitCode {
    cli::main()
}
