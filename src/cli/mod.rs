//! Command-line front end: one file per subcommand (args, wiring, rendering).
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

pub mod batch_input;
pub mod bench;
/// Moved below `cli` (`serve --trace` checks its path too); kept here under their old names.
pub use crate::files::{clobber, outfile};
pub mod completions;
pub mod generate;
pub mod generate_args;
pub mod generate_stats;
pub mod kv_size;
pub mod man;
pub mod offload_stats;
pub mod output;
pub mod perplexity;
pub mod run_batch;
pub mod seed;
pub mod tokenize;
pub mod trace_svg;
pub mod version;

/// nanollm: run a real LLM and see its KV cache.
#[derive(Parser, Debug)]
#[command(
    name = "nanollm",
    about = "Run a real LLM on the CPU and make its KV cache visible and measurable",
    after_help = "Examples:\n  nanollm generate --show-stats \"What is the capital of France?\"\n  nanollm bench --compare naive,kv-cache --prompt-len 128,512 --gen-len 128\n  nanollm kv-size --model qwen3-32b --seq 128k\n  nanollm tokenize --show-count \"Hello world\""
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Stream a completion from a model, with per-token stats (TTFT, TPOT, ITL, KV bytes).
    Generate(generate_args::GenerateArgs),
    /// Run several decode modes on the same prompts and compare their latency.
    Bench(Box<bench::BenchArgs>),
    /// KV-cache memory for a model config at a given context length (never loads weights).
    KvSize(kv_size::KvSizeArgs),
    /// Perplexity and KL divergence over a text, as llama-perplexity (e.g. per KV dtype).
    Perplexity(perplexity::PerplexityArgs),
    /// Show the token ids (and pieces) a text becomes, as llama.cpp's llama-tokenize does.
    Tokenize(tokenize::TokenizeArgs),
    /// Run many requests from a JSONL file at once through the batched engine (continuous
    /// batching, prefix caching), one JSON result per line, as vLLM's run-batch.
    RunBatch(run_batch::RunBatchArgs),
    /// An OpenAI-compatible HTTP server over the batched engine (/v1/chat/completions,
    /// /v1/completions, streaming, /metrics), as vllm serve and llama-server.
    Serve(crate::serve::ServeArgs),
    /// Draw a --trace file as an SVG timeline: engine steps (schedule, forward, sample), KV
    /// blocks, and one lane per request (queued, prefill chunks, decode, preempted).
    TraceSvg(trace_svg::TraceSvgArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish) to stdout.
    Completions(completions::CompletionsArgs),
    /// Print the manual page (roff) to stdout, or write one page per command with --dir.
    Man(man::ManArgs),
}

/// The whole command line's definition: [`Cli`]'s, with `-V` saying the version and the
/// commit it was built from, and `--version` also the kernels this CPU chose
/// ([`version::long`]). Completions, the manual pages and the README's test read it too.
pub fn command() -> clap::Command {
    static VERSIONS: std::sync::OnceLock<(&'static str, &'static str)> = std::sync::OnceLock::new();
    let (short, long) = *VERSIONS.get_or_init(|| {
        (
            Box::leak(version::short().into_boxed_str()),
            Box::leak(version::long().into_boxed_str()),
        )
    });
    Cli::command().version(short).long_version(long)
}

/// Parse the arguments, run, and turn the outcome into an exit code.
///
/// Errors print as one line, `error: <what>: <why>`, on stderr with exit code 1; a closed
/// stdout (`| head`) ends quietly with exit code 0; Ctrl-C ends with 130 after the stats.
pub fn main() -> ExitCode {
    // Errors are one line: keep library backtraces (candle attaches one to its errors when
    // RUST_BACKTRACE is set) out of them; panics still honour RUST_BACKTRACE.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    let matches = match command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    // What clap's own rules cannot say (its `requires` is skipped when the required flag
    // conflicts with a flag given, clap issue #4520), from where each value came.
    if let Some(("bench", sub)) = matches.subcommand() {
        if let Err(e) = bench::args::check_command_line(sub, <Cli as clap::CommandFactory>::command)
        {
            return usage_error(e);
        }
    }
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let result = match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Bench(args) => bench::run(*args),
        Command::KvSize(args) => kv_size::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::RunBatch(args) => run_batch::run(args),
        Command::Serve(args) => crate::serve::run(args),
        Command::TraceSvg(args) => trace_svg::run(args),
        Command::Completions(args) => completions::run(args, command()),
        Command::Man(args) => man::run(args, command()),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            if output::is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            let msg = format!("{err:#}").replace('\n', " ");
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// A command-line parse error as one line, `error: <what>` (clap's usage and tip lines
/// dropped; `--help` names every flag), exit code 2; `--help` and `--version` print as
/// usual.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            // To stdout; one that cannot take it (a full disk) is an error, a closed pipe
            // (`| head`) is not.
            return match e.print() {
                Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
                    eprintln!("error: stdout: {err}");
                    ExitCode::FAILURE
                }
                _ => ExitCode::SUCCESS,
            };
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(2);
        }
        _ => {}
    }
    // The first paragraph: the message and, for missing arguments, the indented list of them.
    let text = e.render().to_string();
    let first: Vec<&str> = text
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let first = match first.join(" ") {
        s if s.is_empty() => "invalid arguments".to_string(),
        s => s,
    };
    let first = first.strip_prefix("error: ").unwrap_or(&first);
    eprintln!("error: {first} (see --help)");
    ExitCode::from(2)
}
