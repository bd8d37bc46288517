//! `nanollm`: parse the command line, run the subcommand, map errors to exit codes.
/// Counts live heap bytes for `/metrics` (`nanollm_heap_live_bytes`) and the soak test.
#[global_allocator]
static ALLOC: nanollm::heap::CountingAlloc = nanollm::heap::CountingAlloc;

fn main() -> std::process::ExitCode {
    nanollm::cli::main()
}
