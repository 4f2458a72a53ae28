//! The `herald` CLI, built inside the test crate so that tests can run it as a process
//! (`CARGO_BIN_EXE_herald-it`).

fn main() -> std::process::ExitCode {
    herald_cli::main()
}
