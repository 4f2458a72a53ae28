//! The `heraldd` program, built inside the test crate so that tests can run it as a process
//! (`CARGO_BIN_EXE_heraldd-it`).

fn main() -> std::process::ExitCode {
    herald_daemon::cli::main()
}
