//! `nanollm bench`: run several decode modes on the same prompts and compare their latency.
use crate::bench::machine::{CpuTimes, Machine};
use crate::bench::plan::parse_modes;
use crate::bench::roofline::BenchRoofline;
use crate::bench::roofline_svg::{render_roofline_svg, stack};
use crate::bench::run::{run_plan, Observer, PlanOutcome, RunLabel};
use crate::bench::svg::render_svg;
use crate::bench::text::{PromptText, TEXT_NAME};
use crate::bench::{BenchPlan, Report, RunSample, Scenario, Settings};
use crate::cli::bench_machine::{measure_limits, run_machine};
use crate::cli::generate::PrefillKernel;
use crate::cli::kv_size::parse_count;
use crate::cli::outfile::{check_writable, same_file, write_whole};
use crate::cli::output::write_stdout;
use crate::cli::runtime;
use crate::model::source;
use crate::roofline;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit status when the compared modes generated different tokens.
pub const EXIT_TOKENS_DIFFER: u8 = 3;

/// Columns of the terminal step-latency chart.
const CHART_WIDTH: usize = 48;

const AFTER_HELP: &str = "\
Examples:
  nanollm bench --compare naive,kv-cache --prompt-len 128,512 --gen-len 128 --runs 3
  nanollm bench --prompt-len 16 --gen-len 8 --runs 1 --warmup 0 --json report.json --plot steps.svg
  nanollm bench --concurrency 1,2,4,8 --prompt-len 128 --gen-len 128
  nanollm bench --scenario shared-prefix --prefix-len 1k --suffix-len 64 --requests 16
  nanollm bench --scenario chat --turns 8
  nanollm bench --scenario chunked-prefill --long-prompt-len 4k
  nanollm bench --machine            (only this machine's limits: FMA peak, int8 roof, bandwidth)
  nanollm bench --base-url http://127.0.0.1:8000 --max-concurrency 1,8 --num-prompts 8 \\
    --prompt-len 128 --gen-len 128   (a running OpenAI-compatible server: nanollm serve, llama-server)

Serving (--concurrency, --scenario): requests run through the batched engine (continuous
batching, chunked prefill, prefix caching; see `nanollm run-batch --help`), greedy, KV-cached.
--concurrency: the same --num-prompts prompts (distinct windows of the text) at each level;
decode tok/s (aggregate) = sequences stepped per second over the steps that only decode;
output tok/s = all generated tokens / the whole run (vLLM's output token throughput).

Prompts: exactly N tokens each, the first N tokens of a public-domain text shipped with nanollm
(Jane Austen, Pride and Prejudice, chapters 1-2), tokenized raw (no chat template). Every run
decodes greedily and generates exactly --gen-len tokens (end-of-sequence ignored, as llama-bench
and vLLM's ignore_eos do), so every mode does the same work and must produce the same tokens.

Metrics per run (as vLLM's benchmark defines them), reported as mean ± std (min) over --runs:
  TTFT   time to first token: prefill + first sampling (ms)
  TPOT   time per output token after the first: (E2EL - TTFT) / (gen - 1) (ms)
  ITL    inter-token latency, p50 and p99 of each run's gaps (ms)
  E2EL   end-to-end latency of the run (ms)
  decode tokens/s = (gen - 1) / (E2EL - TTFT); prefill tokens/s = prompt / prefill time
Speedups (× over the baseline: naive when listed, else the first mode): TPOT and E2EL as
baseline mean / mode mean, decode tokens/s as mode mean / baseline mean.

Roofline: before the runs, bench measures this machine's limits (about 1–2 s, on --threads
threads): the f32 FMA peak (GFLOP/s), the int8 dot-product roof (with the decode kernels' own
instruction: AVX-512 VNNI's vpdpbusd where present, else vpmaddubsw/vpmaddwd; GOP/s at 2 ops
per multiply-add) and the streaming read bandwidth (GB/s = 10^9 bytes/s, over 512 MiB, and
over a buffer the size of the decode weights, which the CPU's caches may hold: % of cached).
Each (mode, prompt) then gets: prefill FLOPs counted from the model's shapes (2 per weight per
row, attention's QK^T and PV over the causal triangle, the LM head for the last row only) over
the mean prefill time (GFLOP/s, % of the f32 peak), and per decode token the bytes read (every
weight matrix once, LM head included, + the K/V at the mean context in the KV dtype) over the
mean TPOT (GB/s, % of the bandwidth), with each phase's FLOP/byte. --machine measures only the
limits (no model is loaded) and prints them, or writes them as JSON with --json.

Token counts (--prompt-len, --gen-len) use kv-size's grammar: k = 1,024 tokens (1k = 1024).

Output: progress on stderr, the table, the roofline table and a step-latency chart on stdout;
--json FILE writes the whole report (settings, machine, every run's samples and steps, summaries,
speedups, token check, roofline); --plot FILE.svg draws the step-latency chart with the roofline
chart under it.
--json - (or --plot -) writes that document to stdout instead, and the table goes to stderr.

Exit status: 0 success; 1 error; 2 usage error; 3 the modes generated different tokens (loud
warning on stderr, report still written), or with --base-url some requests failed (each
failure on stderr, report still written); 130 interrupted by Ctrl-C (no report).";

/// Arguments of `nanollm bench`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP, allow_negative_numbers = true)]
pub struct BenchArgs {
    /// Decode modes to compare, comma-separated (naive, kv-cache).
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
    /// Tokens to generate in every run (≥ 2); k = 1,024 tokens as in kv-size.
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
    /// CPU threads [default: the number of physical cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Matrix kernels for prefill (see `nanollm generate --help`).
    #[arg(long, value_enum, default_value_t = PrefillKernel::Dense)]
    pub prefill_kernel: PrefillKernel,
    /// How the KV cache stores K and V: f32, f16, bf16 or q8_0.
    #[arg(long, value_name = "f32|f16|bf16|q8_0", default_value = "f16")]
    pub kv_cache_dtype: String,
    /// Tokens per block of the paged KV cache (1 to 256).
    #[arg(long, default_value_t = crate::kv::DEFAULT_BLOCK_SIZE)]
    pub block_size: usize,
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
    pub scenario: Option<crate::cli::bench_serving::ScenarioName>,
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
            "compare", "runs", "warmup", "threads", "prefill_kernel", "kv_cache_dtype",
            "block_size", "plot", "scenario", "prefix_len", "suffix_len", "requests", "turns",
            "long_prompt_len", "machine", "max_num_seqs", "max_num_batched_tokens", "kv_mem",
            "max_model_len", "enable_prefix_caching", "no_enable_prefix_caching",
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
    #[command(flatten)]
    pub engine: crate::cli::engine_args::EngineArgs,
    /// Only measure this machine's limits (f32 FMA peak per core and on --threads threads,
    /// int8 dot-product roof, streaming read bandwidth; about 1–2 s) and print them; no model
    /// is loaded. --json FILE (or -) writes them as JSON.
    #[arg(
        long,
        conflicts_with_all = [
            "plot", "compare", "runs", "warmup", "prompt_len", "gen_len", "concurrency",
            "scenario",
        ]
    )]
    pub machine: bool,
}

/// Warn (one line each on stderr) about scenario flags the chosen benchmark ignores, as
/// `generate` does for sampling flags under greedy decoding.
fn warn_unused_scenario_flags(args: &BenchArgs) {
    use crate::cli::bench_serving::ScenarioName::{Chat, ChunkedPrefill, SharedPrefix};
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

/// Run `nanollm bench`.
pub fn run(args: BenchArgs) -> Result<ExitCode> {
    warn_unused_scenario_flags(&args);
    if args.machine {
        return run_machine(&args);
    }
    if args.base_url.is_some() {
        return crate::cli::bench_http::run(args);
    }
    if !args.concurrency.is_empty() || args.scenario.is_some() {
        return crate::cli::bench_serving::run(args);
    }
    let plan = BenchPlan {
        modes: parse_modes(&args.compare)?,
        prompt_lens: if args.prompt_len.is_empty() {
            vec!["128".to_string(), "512".to_string()]
        } else {
            args.prompt_len.clone()
        }
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if s.trim().is_empty() && args.prompt_len.len() > 1 {
                bail!(
                    "--prompt-len '{}': value {} of the list is empty",
                    args.prompt_len.join(","),
                    i + 1
                );
            }
            parse_tokens("--prompt-len", s)
        })
        .collect::<Result<_>>()?,
        gen_len: parse_tokens("--gen-len", &args.gen_len)?,
        runs: args.runs,
        warmup: args.warmup,
        cache: crate::cli::generate::cache_config(&args.kv_cache_dtype, args.block_size)?,
    };
    plan.validate()?;
    check_outputs(args.json.as_deref(), args.plot.as_deref())?;
    let threads = runtime::init_threads(args.threads)?;
    let path = source::resolve(args.model.as_deref())?;
    let model = args.prefill_kernel.load(&path)?;
    let text = PromptText::tokenize(&model.tokenizer)?;
    plan.check_fits(model.config().max_position_embeddings, text.len())?;
    // What a dense prompt reads (a prompt auto runs on the quantized kernels is counted
    // with the decode matrices: BenchRoofline::new).
    let weights = roofline::model_weights(
        &path,
        model.config(),
        args.prefill_kernel.loads_dense_copy(),
    )?;
    let limits = measure_limits(true).with_working_set(weights.decode.total());

    let mut machine = Machine::detect(threads);
    let cpu_before = CpuTimes::now();
    let interrupt = runtime::interrupt_flag();
    let mut progress = Progress::new(plan.total_tokens());
    let outcome = run_plan(
        &model.decoder,
        &model.tokenizer,
        &text,
        &plan,
        interrupt,
        &mut progress,
    );
    progress.bar.finish_and_clear();
    let samples = match outcome? {
        PlanOutcome::Finished(samples) => samples,
        PlanOutcome::Interrupted => {
            eprintln!("interrupted: no report written");
            return Ok(ExitCode::from(130));
        }
    };

    let settings = Settings {
        model: path.display().to_string(),
        baseline: plan.baseline(),
        plan,
        threads,
        prefill_kernel: format!("{:?}", args.prefill_kernel).to_lowercase(),
        sampling: "greedy".to_string(),
        ignore_eos: true,
        prompt_text: TEXT_NAME.to_string(),
        prompt_text_tokens: text.len(),
    };
    if let (Some(before), Some(after)) = (cpu_before, CpuTimes::now()) {
        machine.other_processes_cpus = before.others_since(&after, machine.logical_cpus);
    }
    let mut report = Report::new(settings, machine, samples);
    report.roofline = Some(BenchRoofline::new(
        model.config(),
        weights,
        |len| model.decoder.prompt_is_dense(len),
        limits,
        &report.settings.plan,
        &report.runs,
    ));
    if let Some(file) = &args.json {
        let doc =
            serde_json::to_string_pretty(&report).context("cannot serialise the report")? + "\n";
        write_output("--json", file, &doc)?;
    }
    if let Some(file) = &args.plot {
        let subtitle = format!(
            "{} · mean of {} run(s) · {} generated tokens · {} threads",
            path.file_name()
                .map_or(String::new(), |f| f.to_string_lossy().into_owned()),
            report.settings.plan.runs,
            report.settings.plan.gen_len,
            threads
        );
        let steps = render_svg(
            &report.step_latency,
            "Decode step latency vs position",
            &subtitle,
        );
        let svg = match &report.roofline {
            Some(r) => stack(&steps, &render_roofline_svg(r, &subtitle)),
            None => steps,
        };
        write_output("--plot", file, &svg)?;
    }
    let text = report.render_text(CHART_WIDTH);
    if [&args.json, &args.plot]
        .iter()
        .any(|p| p.as_deref().is_some_and(is_stdout))
    {
        // stdout carries the JSON or SVG document: keep it machine-readable.
        eprint!("{text}");
    } else {
        write_stdout(&text)?;
    }
    if !report.token_check.identical {
        warn_tokens_differ(&report);
        return Ok(ExitCode::from(EXIT_TOKENS_DIFFER));
    }
    Ok(ExitCode::SUCCESS)
}

/// The loud warning printed when the modes generated different tokens.
fn warn_tokens_differ(report: &Report) {
    let rule = "=".repeat(78);
    eprintln!("warning: {rule}");
    eprintln!("warning: THE DECODE MODES GENERATED DIFFERENT TOKENS: the speedups compare different work.");
    for m in &report.token_check.mismatches {
        eprintln!(
            "warning: prompt {}: {} run {} differs from {} run {} at generated token {} ({} vs {})",
            m.prompt_len,
            m.mode.name(),
            m.run,
            m.reference_mode.name(),
            m.reference_run,
            m.first_difference,
            m.token.map_or("none".into(), |t| t.to_string()),
            m.reference_token.map_or("none".into(), |t| t.to_string()),
        );
    }
    eprintln!("warning: {rule}");
}

/// A token count for `flag` with kv-size's grammar ([`parse_count`]: `1k` = 1,024). A plain
/// `0` passes through so that [`BenchPlan::validate`] names the rule it breaks.
pub(crate) fn parse_tokens(flag: &str, s: &str) -> Result<usize> {
    if s.trim() == "0" {
        return Ok(0);
    }
    let n = parse_count(flag, s)?;
    usize::try_from(n).map_err(|_| anyhow!("{flag} '{s}': too large for this machine"))
}

/// `--request-rate`, shared by the in-process and HTTP serving benchmarks. Errors: not
/// above 0 (NaN included; `inf` means all at once), or below 0.001 requests/s.
pub(crate) fn check_request_rate(rate: Option<f64>) -> Result<()> {
    let Some(r) = rate else {
        return Ok(());
    };
    let shown = crate::cli::units::short_number(r);
    if r.is_nan() || r <= 0.0 {
        bail!("--request-rate {shown}: must be > 0 requests/s (inf: all at once)");
    }
    if r < 1e-3 {
        bail!("--request-rate {shown}: requests would arrive more than 1,000 s apart on average; give at least 0.001");
    }
    Ok(())
}

/// True when an output path is `-`, meaning stdout.
pub(crate) fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Check the `--json` and `--plot` outputs before anything runs: each a writable file (or
/// `-` for stdout), and not both the same file or both stdout. Errors: one line.
pub(crate) fn check_outputs(json: Option<&Path>, plot: Option<&Path>) -> Result<()> {
    for (flag, path) in [("--json", json), ("--plot", plot)] {
        if let Some(path) = path.filter(|p| !is_stdout(p)) {
            check_writable(flag, path)?;
        }
    }
    if let (Some(j), Some(p)) = (json, plot) {
        if is_stdout(j) && is_stdout(p) {
            bail!(
                "--json - and --plot -: both would write to stdout; give one of them a file name"
            );
        }
        if !is_stdout(j) && !is_stdout(p) && same_file(j, p) {
            bail!(
                "--json {} and --plot {}: the same file; the one written last would overwrite the other",
                j.display(),
                p.display()
            );
        }
    }
    Ok(())
}

/// Write `contents` to stdout when `path` is `-`, else to the file, whole ([`write_whole`]).
pub(crate) fn write_output(flag: &str, path: &Path, contents: &str) -> Result<()> {
    if is_stdout(path) {
        return Ok(write_stdout(contents)?);
    }
    write_whole(flag, path, contents.as_bytes())
}

/// Progress on stderr: a bar over every generated token (hidden when stderr is not a
/// terminal) and one line per finished run.
struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new(total_tokens: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total_tokens), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} tokens  {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress { bar }
    }

    fn line(&self, text: String) {
        if self.bar.is_hidden() {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }
}

fn label_text(scenario: Scenario, label: RunLabel) -> String {
    let kind = if label.warmup { "warm-up" } else { "run" };
    format!(
        "{} · prompt {} · {kind} {}/{}",
        scenario.mode.name(),
        scenario.prompt_len,
        label.index,
        label.of
    )
}

impl Observer for Progress {
    fn run_started(&mut self, scenario: Scenario, label: RunLabel) {
        self.bar.set_message(label_text(scenario, label));
    }

    fn step(&mut self) {
        self.bar.inc(1);
    }

    fn run_finished(&mut self, scenario: Scenario, label: RunLabel, s: &RunSample) {
        self.line(format!(
            "{}: TTFT {:.2} ms, TPOT {:.2} ms, E2EL {:.1} ms, decode {:.2} tokens/s",
            label_text(scenario, label),
            s.ttft_ms,
            s.tpot_ms,
            s.e2el_ms,
            s.decode_tokens_per_s
        ));
    }
}
