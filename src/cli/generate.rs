//! `nanollm generate`: stream a completion and show its per-token stats.
use crate::cli::output::write_stdout;
use crate::cli::runtime;
use crate::engine::{
    self, CacheConfig, DecodeMode, FinishReason, Generation, Request, SamplingParams,
};
use crate::kv::codec::parse_runtime_dtype;
use crate::kv::{DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE};
use crate::model::chat::{self, ChatOptions, Message};
use crate::model::{source, LoadOptions, Loaded, WeightDtype};
use crate::roofline::{self, MachineLimits, ModelWeights, RooflineLine, RunShape};
use anyhow::{bail, Context, Result};
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

const AFTER_HELP: &str = "\
Examples:
  nanollm generate --show-stats \"What is the capital of France?\"
  nanollm generate --decode naive --max-new-tokens 32 --no-chat \"Once upon a time\"
  echo \"Explain the KV cache\" | nanollm generate --json - > run.json

Chat: when the model ships a chat template (the default model does), the prompt is wrapped in
it as one user turn (--system adds a system turn), as llama.cpp's conversation mode and vLLM's
chat API do. --no-chat sends the prompt as raw text.

Stats (--show-stats, on stderr; --json puts them in the JSON on stdout), as vLLM defines them:
  TTFT   time to first token: from after tokenization to the first sampled token (prefill + sample)
  TPOT   time per output token: (end-to-end - TTFT) / (generated - 1), the first token excluded
  ITL    inter-token latency: each gap between two consecutive tokens (p50/p90/p99/max)
  E2EL   end-to-end latency of the request

Roofline (--show-stats, --json): prefill FLOPs counted from the model's shapes (2 per weight per
prompt row, attention's QK^T and PV over the causal triangle, the LM head for the last row only)
over the prefill time (GFLOP/s), and per decode token the bytes read (every weight matrix once,
LM head included, + the K/V at the mean context in the KV dtype) over TPOT (GB/s), with each
phase's FLOP/byte. --roofline also measures this machine's limits after the run (f32 FMA peak,
int8 roof, read bandwidth: about 1.5 s) to show % of peak and which roof binds each phase.

KV cache: a paged block pool (PagedAttention): blocks of --block-size tokens taken on demand,
stored as --kv-cache-dtype (f16 by default, as llama.cpp). Bytes per token =
2 x layers x kv_heads x head_dim x bytes per value (q8_0: 34 bytes per 32 values); the stats
show the bytes measured from the pool next to kv-size's estimate, the blocks held and how much
of a contiguous reservation (prompt + max_new_tokens, or the full context) would be used.";

/// Arguments of `nanollm generate`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct GenerateArgs {
    /// The prompt; `-` reads it from stdin.
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(long, value_name = "FILE", conflicts_with = "prompt")]
    pub prompt_file: Option<PathBuf>,
    /// A .gguf file, a Hugging Face model folder (config.json, model.safetensors or shards,
    /// tokenizer.json), or a hub id (org/name) already in the local HF cache
    /// [default: SmolLM2-135M-Instruct Q4_1 in the nanollm cache].
    #[arg(long, short = 'm', value_name = "PATH|ORG/NAME")]
    pub model: Option<PathBuf>,
    /// Hub revision (branch, tag or commit) for a hub id --model [default: main].
    #[arg(long, value_name = "REV")]
    pub revision: Option<String>,
    /// Weight compute dtype. Only f32 runs on the CPU: f32, f16 and bf16 safetensors are
    /// converted to f32 at load (4 bytes per parameter) and computed in f32, as attention is
    /// (the KV cache's storage is --kv-cache-dtype); a GGUF keeps its quantized matrices.
    /// bf16 and f16 are refused:
    /// candle's CPU bf16/f16 matrix-vector kernels are slower than f32 gemm, and its f16 gemm
    /// rounds activations to f16.
    #[arg(long, value_name = "f32|bf16|f16")]
    pub dtype: Option<WeightDtype>,
    /// Most tokens to generate.
    #[arg(long, short = 'n', default_value_t = 256)]
    pub max_new_tokens: usize,
    /// Decode with the KV cache (prefill once, one token per step) or naively (recompute the
    /// whole sequence every step).
    #[arg(long, value_enum, default_value_t = DecodeMode::KvCache)]
    pub decode: DecodeMode,
    /// Sampling temperature; 0 = greedy.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f64,
    /// Sample only from the k most likely tokens.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Nucleus sampling threshold, in (0, 1].
    #[arg(long, allow_negative_numbers = true)]
    pub top_p: Option<f64>,
    /// Random seed for sampling [default: drawn at random and reported when --temperature
    /// > 0, so the run can be repeated with --seed].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Penalty for repeating recent tokens (1.0 = off).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub repeat_penalty: f32,
    /// How many recent tokens the repeat penalty considers.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Stop when the text contains this string (repeatable).
    #[arg(long, value_name = "TEXT")]
    pub stop: Vec<String>,
    /// Wrap the prompt in the model's chat template (the default when it has one). The
    /// prompt is message text, data: control-token text in it (such as <|im_end|>) is
    /// tokenized as plain text; only the template's markup gives control tokens.
    #[arg(long, overrides_with = "no_chat")]
    pub chat: bool,
    /// Send the prompt as raw text, without the chat template. Control-token text in it
    /// (such as <|im_start|>) maps to its ids, as in llama.cpp.
    #[arg(long, overrides_with = "chat")]
    pub no_chat: bool,
    /// System message for the chat template.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// How the KV cache stores K and V: f32, f16, bf16 or q8_0 (ggml's 8-bit blocks: 34
    /// bytes per 32 values, dequantized inside the attention kernel).
    #[arg(long, value_name = "f32|f16|bf16|q8_0", default_value = "f16")]
    pub kv_cache_dtype: String,
    /// Tokens per block of the paged KV cache (1 to 256).
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE)]
    pub block_size: usize,
    /// Print timing, KV-cache and roofline stats and a per-token table on stderr.
    #[arg(long)]
    pub show_stats: bool,
    /// After the run, measure this machine's limits (f32 FMA peak, int8 roof, read
    /// bandwidth; about 1.5 s) and show each phase as % of its roof (implies --show-stats;
    /// with --json, adds them to the JSON).
    #[arg(long)]
    pub roofline: bool,
    /// Write one JSON document (text, stats, per-token rows) to stdout instead of the text.
    #[arg(long)]
    pub json: bool,
    /// Matrix kernels for prefill: `dense` dequantizes the weights to f32 once at load and
    /// runs prefill as f32 GEMMs (closer to the full-precision model, and faster from ~128
    /// prompt tokens on); `quantized` uses the GGUF kernels everywhere, as llama.cpp does
    /// (faster for short prompts, but 8-bit activations over the whole prompt change this
    /// small model's answers: "What is the capital of France?" gets "L'Étoile, la
    /// Marseillaise, …"); `auto` picks per request by prompt length (quantized below 128
    /// tokens). Decode steps always use the quantized kernels.
    #[arg(long, value_enum, default_value_t = PrefillKernel::Dense)]
    pub prefill_kernel: PrefillKernel,
    /// CPU threads [default: the number of physical cores].
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Which kernels prefill runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefillKernel {
    /// Per request, by prompt length: quantized below [`AUTO_DENSE_PROMPT_TOKENS`] tokens,
    /// dense from there on.
    Auto,
    /// f32 GEMM over weights dequantized at load.
    Dense,
    /// The GGUF quantized kernels.
    Quantized,
}

/// `--prefill-kernel auto`'s threshold: prompts of at least this many tokens run on the
/// dense f32 GEMM. Below it the quantized kernels (eight rows per pass over the weights)
/// are faster than streaming the 424 MB f32 copy: measured on this project's machine,
/// TTFT of 1 / 16 / 64 tokens 5.7 / 26.5 / 103 ms quantized against 28.8 / 68.4 / 181 ms
/// dense, about even at 128. Not the default: a short chat prompt prefilled with 8-bit
/// activations changes the default model's answers (see `--prefill-kernel`).
pub const AUTO_DENSE_PROMPT_TOKENS: usize = 128;

impl PrefillKernel {
    /// Whether the weights need their dense f32 prefill copy.
    pub fn loads_dense_copy(self) -> bool {
        self != PrefillKernel::Quantized
    }

    /// The decoder's [`crate::model::Decoder::set_dense_prompt_min_tokens`] for this choice.
    pub fn dense_prompt_min_tokens(self) -> usize {
        match self {
            PrefillKernel::Auto => AUTO_DENSE_PROMPT_TOKENS,
            PrefillKernel::Dense => 0,
            PrefillKernel::Quantized => usize::MAX,
        }
    }

    /// Load the model at `path` for this choice. Errors: as [`source::load`].
    pub fn load(self, path: &std::path::Path) -> Result<Loaded> {
        let mut model = source::load(path, &candle_core::Device::Cpu, self.loads_dense_copy())?;
        model
            .decoder
            .set_dense_prompt_min_tokens(self.dense_prompt_min_tokens());
        Ok(model)
    }
}

/// Run `nanollm generate`.
pub fn run(args: GenerateArgs) -> Result<ExitCode> {
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: resolve_seed(args.seed, args.temperature),
        repeat_penalty: args.repeat_penalty,
        repeat_last_n: args.repeat_last_n,
    };
    sampling.validate()?;
    warn_ineffective(&args);
    if args.max_new_tokens == 0 {
        bail!("--max-new-tokens 0: must be at least 1");
    }
    let cache = cache_config(&args.kv_cache_dtype, args.block_size)?;
    let threads = runtime::init_threads(args.threads)?;
    let prompt = read_prompt(&args)?;
    let path = source::resolve_at(args.model.as_deref(), args.revision.as_deref())?;
    let t_load = Instant::now();
    let opts = LoadOptions {
        dense_prefill: args.prefill_kernel.loads_dense_copy(),
        dtype: args.dtype,
    };
    let mut model = source::load_with(&path, &candle_core::Device::Cpu, opts)?;
    model
        .decoder
        .set_dense_prompt_min_tokens(args.prefill_kernel.dense_prompt_min_tokens());
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;
    let use_chat = !args.no_chat && (args.chat || model.chat_template.is_some());
    let prompt_ids = if use_chat {
        let template = model
            .chat_template
            .as_deref()
            .context(NO_TEMPLATE_FOR_CHAT)?;
        chat::encode_messages(
            &model.tokenizer,
            template,
            &prompt_messages(&prompt, args.system.as_deref()),
            &ChatOptions::generation(model.bos_token.as_deref(), model.eos_token.as_deref()),
        )?
    } else {
        chat::encode_prompt(&model.tokenizer, &prompt)?
    };
    if prompt_ids.is_empty() {
        bail!("the prompt is empty after tokenization");
    }
    let request = Request {
        prompt_ids,
        max_new_tokens: args.max_new_tokens,
        sampling,
        mode: args.decode,
        cache,
        stop_token_ids: Vec::new(),
        stop_strings: args.stop.clone(),
        ignore_eos: false,
    };
    let interrupt = runtime::interrupt_flag();
    let stream = !args.json;
    let gen = engine::generate(
        &model.decoder,
        &model.tokenizer,
        &request,
        interrupt,
        |ev| {
            if stream && !ev.text_delta.is_empty() {
                write_stdout(&ev.text_delta)?;
            }
            Ok(())
        },
    )?;
    let roofline = (args.json || args.show_stats || args.roofline)
        .then(|| run_roofline(&model, &args, &gen, &request));
    if args.json {
        let mut doc = json_report(&model, &args, &gen, load_ms, threads, use_chat, &request);
        if let (Some(obj), Some(r)) = (doc.as_object_mut(), &roofline) {
            obj.insert("roofline".into(), r.json());
        }
        write_stdout(&(serde_json::to_string_pretty(&doc)? + "\n"))?;
    } else {
        if !gen.text.ends_with('\n') {
            write_stdout("\n")?;
        }
        if args.show_stats || args.roofline {
            let drawn = args.seed.is_none() && !request.sampling.is_greedy();
            eprint!(
                "{}",
                render_stats(
                    &model,
                    &gen,
                    load_ms,
                    threads,
                    (&request.sampling, drawn),
                    roofline.as_ref()
                )
            );
        }
    }
    Ok(match gen.finish_reason {
        FinishReason::Interrupted => ExitCode::from(130),
        _ => ExitCode::SUCCESS,
    })
}

/// The sampling seed: `--seed` when given; else, when sampling (temperature > 0), one drawn
/// at random (reported by `--show-stats` and `--json`, as llama.cpp does); else (greedy,
/// where it has no effect) a fixed one.
pub fn resolve_seed(seed: Option<u64>, temperature: f64) -> u64 {
    match seed {
        Some(s) => s,
        None if temperature > 0.0 => crate::cli::batch_input::random_seed(),
        None => SamplingParams::greedy().seed,
    }
}

/// `greedy`, or the temperature, top-k/top-p and seed (and how to repeat a drawn seed).
fn describe_sampling(p: &SamplingParams, seed_drawn: bool) -> String {
    if p.is_greedy() {
        return "greedy".into();
    }
    let mut out = format!("temperature {}", p.temperature);
    if let Some(k) = p.top_k {
        out += &format!(", top-k {k}");
    }
    if let Some(tp) = p.top_p {
        out += &format!(", top-p {tp}");
    }
    out += &format!(", seed {}", p.seed);
    if seed_drawn {
        out += &format!(" (drawn at random: --seed {} repeats this run)", p.seed);
    }
    out
}

/// One warning line on stderr per option that has no effect with the others given.
fn warn_ineffective(args: &GenerateArgs) {
    if args.temperature == 0.0 {
        for (flag, given) in [
            ("--top-k", args.top_k.is_some()),
            ("--top-p", args.top_p.is_some()),
            ("--seed", args.seed.is_some()),
        ] {
            if given {
                eprintln!("warning: {flag} has no effect with greedy decoding (--temperature 0)");
            }
        }
    }
    if args.system.is_some() && args.no_chat {
        eprintln!("warning: --system has no effect with --no-chat (no chat template is applied)");
    }
}

/// The KV cache settings from `--kv-cache-dtype` and `--block-size`. Errors: an unknown or
/// kv-size-only dtype, a block size outside 1..=256; each names its flag.
pub fn cache_config(dtype: &str, block_size: usize) -> Result<CacheConfig> {
    let dtype = parse_runtime_dtype("--kv-cache-dtype", dtype)?;
    if !(1..=MAX_BLOCK_SIZE).contains(&block_size) {
        bail!("--block-size {block_size}: expected 1 to {MAX_BLOCK_SIZE} tokens");
    }
    Ok(CacheConfig { dtype, block_size })
}

fn read_prompt(args: &GenerateArgs) -> Result<String> {
    let prompt = match (&args.prompt, &args.prompt_file) {
        (_, Some(file)) => std::fs::read_to_string(file).with_context(|| {
            let what = if file.is_file() {
                "cannot read it as UTF-8 text"
            } else {
                "cannot read it"
            };
            format!("--prompt-file {}: {what}", file.display())
        })?,
        (Some(p), None) if p == "-" => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("cannot read the prompt from stdin")?;
            s
        }
        (Some(p), None) => p.clone(),
        (None, None) => bail!("no prompt: give PROMPT, --prompt-file FILE, or - to read stdin"),
    };
    if prompt.trim().is_empty() {
        bail!("the prompt is empty");
    }
    Ok(prompt)
}

/// The error of `--chat` on a model without a chat template.
const NO_TEMPLATE_FOR_CHAT: &str =
    "--chat: this model has no chat template; drop --chat to send raw text";

/// `prompt` as one user turn, after a system turn when `system` is given.
pub fn prompt_messages(prompt: &str, system: Option<&str>) -> Vec<Message> {
    let mut messages = Vec::new();
    if let Some(sys) = system {
        messages.push(Message {
            role: "system".into(),
            content: sys.into(),
        });
    }
    messages.push(Message {
        role: "user".into(),
        content: prompt.into(),
    });
    messages
}

/// `prompt` as one user turn (after a system turn when `system` is given) in the model's
/// chat `template` (which sees the model's BOS and EOS texts), ready for the assistant's
/// answer: the text, for display (`tokenize --chat`); the ids come from
/// [`chat::encode_messages`].
///
/// Errors: no template (`--chat` on a model without one), or the template fails to render.
pub fn apply_chat(
    template: Option<&str>,
    (bos_token, eos_token): (Option<&str>, Option<&str>),
    prompt: &str,
    system: Option<&str>,
) -> Result<String> {
    let template = template.context(NO_TEMPLATE_FOR_CHAT)?;
    chat::render(
        template,
        &prompt_messages(prompt, system),
        bos_token,
        eos_token,
    )
}

/// The prompt ids of `messages` in `model`'s chat template, ready for the assistant's
/// answer; message text is data, never control (see [`chat::encode_messages`]).
///
/// Errors: the model has no chat template, the template fails to render, tokenization fails.
pub fn encode_chat_messages(model: &Loaded, messages: &[Message]) -> Result<Vec<u32>> {
    let template = model
        .chat_template
        .as_deref()
        .context("messages: this model has no chat template; send a raw prompt instead")?;
    chat::encode_messages(
        &model.tokenizer,
        template,
        messages,
        &ChatOptions::generation(model.bos_token.as_deref(), model.eos_token.as_deref()),
    )
}

/// Size with exact bytes and binary units, e.g. `3,686,400 bytes (3.52 MiB)`.
pub fn human_bytes(bytes: u64) -> String {
    let units = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    let pretty = units
        .iter()
        .find(|(_, size)| bytes >= *size)
        .map(|(unit, size)| format!(" ({:.2} {unit})", bytes as f64 / *size as f64))
        .unwrap_or_default();
    format!("{} bytes{pretty}", group_digits(bytes))
}

/// `1234567` → `1,234,567`.
pub fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn opt(v: Option<f64>, unit: &str) -> String {
    v.map_or("n/a".to_string(), |x| format!("{x:.2} {unit}"))
}

/// A run's roofline figures, or why there are none, and the limits when measured.
struct RooflineStats {
    line: Result<(ModelWeights, RooflineLine), String>,
    limits: Option<MachineLimits>,
}

impl RooflineStats {
    /// The `roofline` object of `--json`: weights, prefill, decode and limits (null when not
    /// measured); `{"error": ...}` when the weights could not be counted.
    fn json(&self) -> serde_json::Value {
        match &self.line {
            Ok((w, line)) => serde_json::json!({
                "weights": w,
                "prefill": line.prefill,
                "decode": line.decode,
                "limits": self.limits,
            }),
            Err(e) => serde_json::json!({ "error": e, "limits": self.limits }),
        }
    }

    /// The `--show-stats` lines.
    fn lines(&self) -> Vec<(&'static str, String)> {
        let limits = self.limits.as_ref();
        let mut out = match &self.line {
            Ok((_, line)) => {
                let mut v = vec![("roofline prefill", line.prefill_text(limits))];
                v.push((
                    "roofline decode",
                    line.decode_text(limits)
                        .unwrap_or_else(|| "n/a (fewer than two tokens)".to_string()),
                ));
                v
            }
            Err(e) => vec![("roofline", format!("n/a ({e})"))],
        };
        out.push((
            "machine limits",
            match limits {
                Some(l) => l.describe(),
                None => "not measured: add --roofline (about 1.5 s) for % of this machine's f32 peak and read bandwidth".to_string(),
            },
        ));
        out
    }
}

/// Count the run's work and, with `--roofline`, measure the machine's limits now (after
/// the run, so the measurement does not delay the answer).
fn run_roofline(
    model: &Loaded,
    args: &GenerateArgs,
    gen: &Generation,
    request: &Request,
) -> RooflineStats {
    let limits = args.roofline.then(roofline::measure);
    // The kernels this request's prompt really ran on (auto picks by its length).
    let dense = args.prefill_kernel.loads_dense_copy()
        && model.decoder.prompt_is_dense(request.prompt_ids.len());
    if gen.tokens.is_empty() {
        return RooflineStats {
            line: Err("interrupted before the first token: the prefill did not finish".into()),
            limits,
        };
    }
    let line = roofline::model_weights(&model.path, model.config(), dense)
        .map(|w| {
            let s = &gen.stats;
            let shape = RunShape {
                prompt: s.prompt_tokens as u64,
                generated: s.generated_tokens as u64,
                mode: s.decode_mode,
                kv_dtype: request.cache.dtype,
            };
            let line = RooflineLine::new(
                model.config(),
                &w,
                shape,
                s.prefill_ms,
                s.tpot_ms,
                limits.as_ref(),
            );
            (w, line)
        })
        .map_err(|e| format!("{e:#}"));
    RooflineStats { line, limits }
}

fn render_stats(
    model: &Loaded,
    gen: &Generation,
    load_ms: f64,
    threads: usize,
    (sampling, seed_drawn): (&SamplingParams, bool),
    roofline: Option<&RooflineStats>,
) -> String {
    let s = &gen.stats;
    let kv = &s.kv_cache;
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<22}{v}\n"));
    line("model", model.path.display().to_string());
    line(
        "decode mode",
        format!("{} ({threads} threads)", s.decode_mode.name()),
    );
    line("finish reason", gen.finish_reason.name().to_string());
    line("sampling", describe_sampling(sampling, seed_drawn));
    line("prompt tokens", s.prompt_tokens.to_string());
    line("generated tokens", s.generated_tokens.to_string());
    line("model load", format!("{load_ms:.1} ms"));
    if gen.tokens.is_empty() {
        line("TTFT", "n/a (interrupted before the first token)".into());
        line(
            "prefill",
            format!(
                "{:.2} ms, {} of {} prompt tokens (interrupted)",
                s.prefill_ms, kv.tokens, s.prompt_tokens
            ),
        );
    } else {
        line("TTFT", format!("{:.2} ms", s.ttft_ms));
        line(
            "prefill",
            format!(
                "{:.2} ms ({:.1} tokens/s)",
                s.prefill_ms, s.prefill_tokens_per_s
            ),
        );
    }
    line("TPOT", opt(s.tpot_ms, "ms"));
    line(
        "ITL",
        s.itl_ms()
            .map_or("n/a (fewer than two tokens)".into(), |p| {
                format!(
                    "p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                    p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms
                )
            }),
    );
    line(
        "decode",
        format!(
            "{:.2} ms ({})",
            s.decode_ms,
            opt(s.decode_tokens_per_s, "tokens/s")
        ),
    );
    line("end-to-end (E2EL)", format!("{:.2} ms", s.e2el_ms));
    for (k, v) in kv_lines(kv) {
        line(k, v);
    }
    for (k, v) in roofline.map(RooflineStats::lines).unwrap_or_default() {
        line(k, v);
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["#", "id", "text", "position", "step ms", "cumulative ms"]);
    for ev in &gen.steps {
        table.add_row([
            ev.index.to_string(),
            ev.token_id.to_string(),
            format!("{:?}", model.tokenizer.token_text(ev.token_id)),
            ev.position.to_string(),
            format!("{:.2}", ev.latency_ms),
            format!("{:.2}", ev.elapsed_ms),
        ]);
    }
    if gen.steps.is_empty() {
        return format!("\n{out}");
    }
    format!("\n{out}\n{table}\n")
}

/// The KV-cache lines of `--show-stats`: bytes measured next to kv-size's estimate, blocks,
/// and the utilisation of the paged cache against a contiguous reservation.
pub fn kv_lines(kv: &crate::engine::stats::KvStats) -> Vec<(&'static str, String)> {
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    vec![
        (
            "KV cache",
            format!(
                "{}, {} measured ({})",
                plural(kv.tokens, "token"),
                human_bytes(kv.bytes_used),
                kv.dtype
            ),
        ),
        ("KV cache estimate", human_bytes(kv.bytes_estimated)),
        (
            "KV blocks",
            format!(
                "{} of {}, last {}/{} full: {} held (estimate {})",
                plural(kv.blocks, "block"),
                plural(kv.block_size, "token"),
                kv.last_block_tokens,
                kv.block_size,
                human_bytes(kv.bytes_held),
                human_bytes(kv.bytes_estimated_paged)
            ),
        ),
        ("KV pool allocated", human_bytes(kv.bytes_allocated)),
        (
            "KV utilisation",
            format!(
                "paged {:.1}%; a contiguous reservation of prompt + max_new_tokens ({} tokens, {}) would be {:.1}% used, of the full context ({} tokens) {:.1}%",
                kv.paged_utilisation_pct(),
                group_digits(kv.reserved_tokens as u64),
                human_bytes(kv.reserved_bytes),
                kv.reserved_utilisation_pct(),
                group_digits(kv.context_tokens as u64),
                kv.context_utilisation_pct()
            ),
        ),
    ]
}

fn json_report(
    model: &Loaded,
    args: &GenerateArgs,
    gen: &Generation,
    load_ms: f64,
    threads: usize,
    chat: bool,
    request: &Request,
) -> serde_json::Value {
    let tokens: Vec<serde_json::Value> = gen
        .steps
        .iter()
        .map(|ev| {
            serde_json::json!({
                "index": ev.index,
                "id": ev.token_id,
                "text": model.tokenizer.token_text(ev.token_id),
                "position": ev.position,
                "latency_ms": ev.latency_ms,
                "elapsed_ms": ev.elapsed_ms,
            })
        })
        .collect();
    let mut doc = serde_json::json!({
        "model": model.path.display().to_string(),
        "settings": {
            "decode_mode": args.decode,
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_k": args.top_k,
            "top_p": args.top_p,
            "seed": request.sampling.seed,
            "seed_drawn": args.seed.is_none() && !request.sampling.is_greedy(),
            "repeat_penalty": args.repeat_penalty,
            "repeat_last_n": args.repeat_last_n,
            "chat": chat,
            "threads": threads,
            "prefill_kernel": args.prefill_kernel,
            "kv_cache_dtype": gen.stats.kv_cache.dtype,
            "block_size": gen.stats.kv_cache.block_size,
        },
        "prompt_ids": request.prompt_ids,
        "text": gen.text,
        "finish_reason": gen.finish_reason,
        "model_load_ms": load_ms,
        "stats": gen.stats,
        "tokens": tokens,
    });
    // No inter-token latency exists with fewer than two tokens: null, not zeros.
    if let Some(stats) = doc.get_mut("stats").and_then(|v| v.as_object_mut()) {
        stats.insert("itl".into(), serde_json::json!(gen.stats.itl_ms()));
        let kv = &gen.stats.kv_cache;
        if let Some(k) = stats.get_mut("kv_cache").and_then(|v| v.as_object_mut()) {
            k.insert(
                "paged_utilisation_pct".into(),
                kv.paged_utilisation_pct().into(),
            );
            k.insert(
                "reserved_utilisation_pct".into(),
                kv.reserved_utilisation_pct().into(),
            );
            k.insert(
                "context_utilisation_pct".into(),
                kv.context_utilisation_pct().into(),
            );
        }
    }
    doc
}
