//! `nanollm bench`'s arguments (clap), and the warnings for flags the chosen benchmark ignores.
use crate::flags::PrefillKernel;
use crate::model::quantize_at_load::InSitu;
use clap::Args;
use std::path::PathBuf;
/// `--scenario` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScenarioName {
    /// A shared prefix + distinct suffixes, one request after another, prefix cache on vs off.
    SharedPrefix,
    /// A multi-turn chat re-sending its history, prefix cache on vs off.
    Chat,
    /// A long prompt arriving while other requests decode, chunked vs one-shot prefill.
    ChunkedPrefill,
}

/// Arguments of `nanollm bench`.
#[derive(Args, Debug)]
#[command(after_help = super::help::AFTER_HELP, allow_negative_numbers = true)]
pub struct BenchArgs {
    /// Decode modes to compare, comma-separated: naive, kv-cache, swa-full, spec (kv-cache
    /// with speculative drafts: --spec's settings, prompt lookup by default).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "naive,kv-cache",
        value_name = "MODES"
    )]
    pub compare: Vec<String>,
    /// Prompt lengths in tokens, comma-separated. Counts take kv-size's suffixes: k = 1,024
    /// tokens (1k = 1024, 1.5k = 1536), m = 1,048,576.
    /// [default: 128,512; with --concurrency or a --scenario: 128]
    #[arg(long, value_delimiter = ',', value_name = "TOKENS")]
    pub prompt_len: Vec<String>,
    /// Tokens to generate in every run (≥ 2 when comparing decode modes and with --scenario
    /// chunked-prefill, where TPOT and ITL need two; ≥ 1 otherwise); k = 1,024 tokens as in
    /// kv-size.
    #[arg(long, default_value = "128", value_name = "TOKENS")]
    pub gen_len: String,
    /// Measured runs per mode and prompt length.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Unrecorded warm-up runs (full runs, as vLLM's benchmark_latency warms up) before the
    /// measured runs of each mode and prompt length.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// A .gguf file, an HF model folder, or a hub id in the local HF cache [default: SmolLM2-135M-Instruct Q4_1 in the nanollm cache].
    #[arg(long, short = 'm', value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// CPU threads [default: RAYON_NUM_THREADS when set, else the number of physical cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Matrix kernels for prefill (see `nanollm generate --help`).
    #[arg(long, value_enum, default_value_t = PrefillKernel::Quantized)]
    pub prefill_kernel: PrefillKernel,
    /// Quantize a Hugging Face folder's matrices at load (see `nanollm generate --help`).
    #[arg(long, value_name = "q8_0|q4_0|q4_k")]
    pub quantize: Option<InSitu>,
    /// Multi-head latent attention (DeepSeek): auto expands the prompt's latents into
    /// per-head K and V and absorbs W_UK into the generated rows' queries; expanded or
    /// absorbed runs every row that way. The roofline counts each path's FLOPs and bytes.
    #[arg(long, value_enum, default_value_t = crate::flags::MlaPathArg::Auto)]
    pub mla_path: crate::flags::MlaPathArg,
    /// How the KV cache stores K and V: f32, f16, bf16, q8_0, q4_0, iq4_nl, q4_0r or iq4_nlr
    /// (r: Hadamard-rotated in groups of up to 128 values before quantizing).
    #[arg(
        long,
        value_name = "f32|f16|bf16|q8_0|q4_0|iq4_nl|q4_0r|iq4_nlr",
        default_value = "f16"
    )]
    pub kv_cache_dtype: String,
    /// Tokens per block of the paged KV cache (1 to 256).
    #[arg(long, default_value_t = crate::kv::DEFAULT_BLOCK_SIZE)]
    pub block_size: usize,
    /// Sliding-window layers (Gemma 3) keep every block and apply their window as a mask,
    /// as llama.cpp's --swa-full does; by default they hold only the window's blocks and
    /// read only its keys. The same tokens either way.
    #[arg(long)]
    pub swa_full: bool,
    #[arg(long, value_name = "POLICY:budget=N", help = crate::flags::runtime::KV_EVICT_HELP)]
    pub kv_evict: Option<String>,
    /// Write the whole report as JSON to this file; `-` writes it to stdout (the table then
    /// goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the step-latency chart (decode step latency vs position) and, under it, the
    /// roofline chart (prefill and decode under the measured roofs, log-log) as SVG to this
    /// file; `-` writes it to stdout (the table then goes to stderr). Not the same file as --json.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Serving benchmark: run --num-prompts requests through the batched engine at each of
    /// these concurrency levels (comma-separated, e.g. 1,2,4,8), reporting aggregate
    /// tokens/s, TTFT, TPOT and peak KV per level.
    #[arg(
        long,
        visible_alias = "max-concurrency",
        value_delimiter = ',',
        value_name = "LEVELS",
        help_heading = "Serving (batched engine)",
        conflicts_with_all = ["compare", "runs", "warmup", "scenario"]
    )]
    pub concurrency: Vec<usize>,
    /// Requests per concurrency level [default: the largest level].
    #[arg(long, value_name = "N", help_heading = "Serving (batched engine)")]
    pub num_prompts: Option<usize>,
    /// Poisson arrival rate of the requests, per second (vLLM's --request-rate) [default:
    /// inf, all at once].
    #[arg(long, value_name = "R", help_heading = "Serving (batched engine)")]
    pub request_rate: Option<f64>,
    /// Generate exactly --gen-len tokens, past end-of-sequence (vLLM's --ignore-eos); bench
    /// always does, the flag is accepted for vLLM command lines.
    #[arg(long, help_heading = "Serving (batched engine)")]
    pub ignore_eos: bool,
    /// A serving scenario: shared-prefix (prefix cache on vs off), chat (multi-turn
    /// history), chunked-prefill (a long prompt arriving while others decode).
    #[arg(
        long,
        value_enum,
        help_heading = "Serving (batched engine)",
        conflicts_with_all = ["compare", "runs", "warmup"]
    )]
    pub scenario: Option<ScenarioName>,
    /// shared-prefix: tokens of the shared prefix [default: 1k].
    #[arg(long, value_name = "TOKENS", help_heading = "Serving (batched engine)")]
    pub prefix_len: Option<String>,
    /// shared-prefix: distinct tokens after the prefix, per request [default: 64].
    #[arg(long, value_name = "TOKENS", help_heading = "Serving (batched engine)")]
    pub suffix_len: Option<String>,
    /// shared-prefix: requests (the first is cold) [default: 16]; chunked-prefill:
    /// requests decoding when the long prompt arrives [default: 4].
    #[arg(long, value_name = "N", help_heading = "Serving (batched engine)")]
    pub requests: Option<usize>,
    /// chat: user turns [default: 8].
    #[arg(long, value_name = "N", help_heading = "Serving (batched engine)")]
    pub turns: Option<usize>,
    /// chunked-prefill: tokens of the long prompt [default: 4k].
    #[arg(long, value_name = "TOKENS", help_heading = "Serving (batched engine)")]
    pub long_prompt_len: Option<String>,
    /// Benchmark a running OpenAI-compatible server instead (nanollm serve, llama-server,
    /// vllm serve): streamed requests, client-side TTFT/TPOT/ITL/E2EL and throughput per
    /// --max-concurrency level (vLLM's `bench serve`); --model is then the served model
    /// name [default: the first of GET /v1/models].
    #[arg(
        long,
        value_name = "URL",
        help_heading = "Serving over HTTP",
        conflicts_with_all = [
            "compare", "runs", "warmup", "threads", "prefill_kernel", "quantize", "kv_cache_dtype",
            "block_size", "plot", "scenario", "prefix_len", "suffix_len", "requests", "turns",
            "long_prompt_len", "machine", "max_num_seqs", "max_num_batched_tokens", "kv_mem",
            "max_model_len", "enable_prefix_caching", "no_enable_prefix_caching",
            "kv_offload_dir", "kv_offload_size",
        ]
    )]
    pub base_url: Option<String>,
    /// --base-url: the route to drive, /v1/completions or /v1/chat/completions.
    #[arg(
        long,
        default_value = "/v1/completions",
        value_name = "PATH",
        help_heading = "Serving over HTTP",
        requires = "base_url"
    )]
    pub endpoint: String,
    /// --base-url: the tokenizer that cuts --prompt-len-token prompts from the shipped text
    /// (a .gguf or HF folder) [default: the default model's]; the token counts reported are
    /// the server's own (usage).
    #[arg(
        long,
        value_name = "PATH",
        help_heading = "Serving over HTTP",
        requires = "base_url"
    )]
    pub tokenizer: Option<PathBuf>,
    /// --base-url: which prompts: each level gets its own windows of the shipped text, and
    /// another seed gives other windows (a server's prefix cache keeps the last run's
    /// prompts: rerun with a new seed to measure cold prompts).
    #[arg(
        long,
        default_value_t = 0,
        value_name = "N",
        help_heading = "Serving over HTTP",
        requires = "base_url"
    )]
    pub seed: u64,
    /// --base-url: send `Authorization: Bearer KEY`.
    #[arg(
        long,
        value_name = "KEY",
        help_heading = "Serving over HTTP",
        requires = "base_url"
    )]
    pub api_key: Option<String>,
    /// Speculative decoding's break-even: acceptance rates of synthetic drafts to sweep,
    /// comma-separated, 0 to 1 — each the probability a draft is right when the drafts
    /// before it were (llama.cpp's --spec-synth-rates gives unconditional ones).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "RATES",
        conflicts_with_all = ["compare", "concurrency", "scenario", "base_url", "machine", "kv_evict"]
    )]
    pub spec_synth_rates: Vec<f64>,
    /// --spec-synth-rates: draft lengths to sweep, comma-separated, 1 to 16 [default: 1,2,4,8].
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "K",
        requires = "spec_synth_rates"
    )]
    pub spec_synth_k: Vec<usize>,
    /// KV memory against quality: score KV dtypes and eviction policies against the full
    /// f16 cache — mean KLD and perplexity on the shipped text's continuation (--runs
    /// windows of --prompt-len (512) + --gen-len tokens) and retrieval on a synthetic passkey
    /// set; a table, --plot FILE.svg (bytes held against KLD and retrieval, the Pareto front
    /// marked), --json FILE.
    #[arg(long, conflicts_with_all = [
        "compare", "concurrency", "scenario", "base_url", "machine", "spec_synth_rates",
        "kv_evict", "kv_cache_dtype", "swa_full",
    ])]
    pub kv_quality: bool,
    /// --kv-quality: the configurations, `;`-separated, each a KV dtype or DTYPE+POLICY:…
    /// (`q8_0;f16+snapkv:budget=50%`) [default: every dtype, each policy at 25/50/75% of the
    /// prompt, q8_0 + snapkv at 50%].
    #[arg(long, value_name = "LIST", requires = "kv_quality")]
    pub kv_quality_configs: Option<String>,
    /// --kv-quality: passkey haystack lengths in filler sentences (~25 tokens each),
    /// comma-separated [default: 8,20,40].
    #[arg(long, value_delimiter = ',', value_name = "N", requires = "kv_quality")]
    pub passkey_lengths: Vec<usize>,
    #[command(flatten)]
    pub engine: crate::flags::EngineArgs,
    #[command(flatten)]
    pub trace: crate::trace::TraceArgs,
    /// Only measure this machine's limits (f32 FMA peak per core and on --threads threads,
    /// int8 dot-product roof, streaming read bandwidth, core-to-core latency; about 1–2 s)
    /// and print them; no model is loaded. --json FILE (or -) writes them as JSON.
    #[arg(
        long,
        conflicts_with_all = [
            "plot", "compare", "runs", "warmup", "prompt_len", "gen_len", "concurrency",
            "scenario", "model", "trace",
        ]
    )]
    pub machine: bool,
}

/// Flags that only `--base-url` uses (`requires = "base_url"` in clap, which clap skips
/// when `--base-url` would conflict with another flag given: clap issue #4520).
const HTTP_ONLY: [&str; 4] = ["endpoint", "tokenizer", "seed", "api_key"];

/// Flags of the batched engine, used by `--concurrency` and `--scenario` only.
const ENGINE_FLAGS: [&str; 8] = [
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_mem",
    "max_model_len",
    "enable_prefix_caching",
    "no_enable_prefix_caching",
    "kv_offload_dir",
    "kv_offload_size",
];

/// Checks of `bench`'s command line that need to know which flags were typed (`m`: the
/// subcommand's matches): a `--base-url` flag without `--base-url` is a usage error; the
/// engine flags (and `--num-prompts`, `--request-rate`) in a run that does not serve get a
/// one-line "has no effect" warning, as the scenario flags do.
///
/// `root` builds the whole command line (its usage goes with the error).
///
/// Errors: the first `--base-url`-only flag given without `--base-url` (clap's error kind,
/// exit code 2).
pub(crate) fn check_command_line(
    m: &clap::ArgMatches,
    root: impl FnOnce() -> clap::Command,
) -> Result<(), clap::Error> {
    use clap::parser::ValueSource::CommandLine;
    let typed = |id: &str| m.value_source(id) == Some(CommandLine);
    let flag = |id: &str| format!("--{}", id.replace('_', "-"));
    if !typed("base_url") {
        if let Some(id) = HTTP_ONLY.iter().find(|id| typed(id)) {
            let mut cmd = root();
            return Err(cmd.error(
                clap::error::ErrorKind::MissingRequiredArgument,
                format!("the argument '{}' requires '--base-url <URL>'", flag(id)),
            ));
        }
    }
    let serving = typed("concurrency") || typed("scenario");
    // Each concurrency level is the engine's --max-num-seqs for that level.
    if typed("concurrency") && typed("max_num_seqs") {
        eprintln!(
            "warning: --max-num-seqs has no effect with --concurrency (each level runs up to that many sequences at once)"
        );
    }
    // One warning line per typed flag of `ids`: "--flag has no effect {why}".
    let warn = |ids: &[&str], why: &str| {
        for id in ids.iter().filter(|id| typed(id)) {
            eprintln!("warning: {} has no effect {why}", flag(id));
        }
    };
    // The scenarios make their own requests, all arriving as the scenario says.
    if typed("scenario") {
        warn(
            &["num_prompts", "request_rate"],
            "with --scenario (it makes its own requests)",
        );
    }
    if !serving && !typed("base_url") {
        warn(
            &ENGINE_FLAGS,
            "without --concurrency or --scenario (the batched engine's flag)",
        );
        warn(
            &["num_prompts", "request_rate"],
            "without --concurrency or --base-url",
        );
    }
    Ok(())
}

/// Warn (one line each on stderr) about scenario flags the chosen benchmark ignores, as
/// `generate` does for sampling flags under greedy decoding.
pub(crate) fn warn_unused_scenario_flags(args: &BenchArgs) {
    use ScenarioName::{Chat, ChunkedPrefill, SharedPrefix};
    let flags = [
        (
            "--prefix-len",
            args.prefix_len.is_some(),
            &[SharedPrefix][..],
        ),
        (
            "--suffix-len",
            args.suffix_len.is_some(),
            &[SharedPrefix][..],
        ),
        ("--turns", args.turns.is_some(), &[Chat][..]),
        (
            "--long-prompt-len",
            args.long_prompt_len.is_some(),
            &[ChunkedPrefill][..],
        ),
        (
            "--requests",
            args.requests.is_some(),
            &[SharedPrefix, ChunkedPrefill][..],
        ),
    ];
    // --prompt-len sizes the concurrency levels and chunked-prefill's decoders; the cache
    // scenarios build their prompts from --prefix-len/--suffix-len or the conversation.
    if let (Some(s @ (SharedPrefix | Chat)), false) = (args.scenario, args.prompt_len.is_empty()) {
        let name = clap::ValueEnum::to_possible_value(&s)
            .map(|v| v.get_name().to_string())
            .unwrap_or_default();
        eprintln!("warning: --prompt-len has no effect with --scenario {name}");
    }
    // The cache scenarios run every request with the prefix cache on, then off.
    if matches!(args.scenario, Some(SharedPrefix | Chat)) && args.engine.no_enable_prefix_caching {
        eprintln!(
            "warning: --no-enable-prefix-caching has no effect with --scenario shared-prefix or chat (they run with the prefix cache on, then off)"
        );
    }
    for (flag, given, used_by) in flags {
        if given && !args.scenario.is_some_and(|s| used_by.contains(&s)) {
            let names: Vec<String> = used_by
                .iter()
                .filter_map(clap::ValueEnum::to_possible_value)
                .map(|v| v.get_name().to_string())
                .collect();
            eprintln!(
                "warning: {flag} has no effect without --scenario {}",
                names.join(" or ")
            );
        }
    }
}
