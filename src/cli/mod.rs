//! Command-line front end: one file per subcommand (args, wiring, rendering).
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

pub mod batch_input;
pub mod bench;
pub mod bench_args;
pub mod bench_http;
pub mod bench_machine;
pub mod bench_serving;
pub mod chat_prompt;
pub mod clobber;
pub mod engine_args;
pub mod generate;
pub mod generate_stats;
pub mod kv_size;
pub mod outfile;
pub mod output;
pub mod perplexity;
pub mod run_batch;
pub mod runtime;
pub mod seed;
pub mod tokenize;
pub mod units;

/// nanollm: run a real LLM and see its KV cache.
#[derive(Parser, Debug)]
#[command(
    name = "nanollm",
    version,
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
    Generate(generate::GenerateArgs),
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
    let matches = match Cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    // What clap's own rules cannot say (its `requires` is skipped when the required flag
    // conflicts with a flag given, clap issue #4520), from where each value came.
    if let Some(("bench", sub)) = matches.subcommand() {
        if let Err(e) = bench_args::check_command_line(sub) {
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
            let _ = e.print();
            return ExitCode::SUCCESS;
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
