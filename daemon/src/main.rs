//! heraldd: the Herald daemon. Everything is in the library (`herald_daemon::cli`).

fn main() -> std::process::ExitCode {
    herald_daemon::cli::main()
}
