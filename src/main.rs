//! `nanollm`: parse the command line, run the subcommand, map errors to exit codes.
fn main() -> std::process::ExitCode {
    nanollm::cli::main()
}
