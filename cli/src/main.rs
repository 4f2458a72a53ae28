//! herald: the Herald operator CLI. Everything is in the library (`herald_cli`).

fn main() -> std::process::ExitCode {
    herald_cli::main()
}
