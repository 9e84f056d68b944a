//! `ari`: run, verify and inspect agent components.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
