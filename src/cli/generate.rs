//! `nanollm generate`: stream a completion and show its per-token stats.
use crate::cli::generate_stats::{json_report, render_stats, run_roofline};
use crate::cli::output::write_stdout;
use crate::cli::seed::{parse_seed, resolve_seed, SeedArg};
use crate::engine::{self, DecodeMode, FinishReason, Request, SamplingParams};
use crate::flags::{cache_config, PrefillKernel};
use crate::kv::DEFAULT_BLOCK_SIZE;
use crate::model::chat::{self, ChatOptions};
use crate::model::chat::{prompt_messages, NO_TEMPLATE_FOR_CHAT};
use crate::model::{source, LoadOptions, WeightDtype};
use crate::process;
use anyhow::{bail, Context, Result};
use clap::Args;
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
int8 roof, read bandwidth from memory and over the decode weights' size, core-to-core latency:
about 1–2 s) to show % of peak and which roof binds each phase.

KV cache: a paged block pool (PagedAttention): blocks of --block-size tokens taken on demand,
stored as --kv-cache-dtype (f16 by default, as llama.cpp). Bytes per token =
2 x layers x kv_heads x head_dim x bytes per value (q8_0: 34 bytes per 32 values); the stats
show the bytes measured from the pool next to kv-size's estimate, the blocks held and how much
of a contiguous reservation (prompt + max_new_tokens, or the full context) would be used.";

/// Arguments of `nanollm generate`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP, allow_negative_numbers = true)]
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
    /// Random seed for sampling [default: drawn at random and reported when sampling
    /// (--temperature above 0), so the run can be repeated with --seed]. -1 draws one, as
    /// llama.cpp's -1; another negative seed is taken modulo 2^64, as run-batch and serve
    /// take a JSON seed.
    #[arg(long, allow_negative_numbers = true, value_parser = parse_seed)]
    pub seed: Option<SeedArg>,
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
    /// Print timing, KV-cache and roofline stats and a per-token table on stderr (with
    /// --json as well: the JSON on stdout, these on stderr).
    #[arg(long)]
    pub show_stats: bool,
    /// After the run, measure this machine's limits (f32 FMA peak, int8 roof, read
    /// bandwidth from memory and over the decode weights' size, core-to-core latency; about
    /// 1–2 s) and show each phase as % of its roof (implies --show-stats; with --json, adds
    /// them to the JSON).
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
    /// Cité, …"); `auto` picks per request by prompt length (quantized below 128
    /// tokens). Decode steps always use the quantized kernels.
    #[arg(long, value_enum, default_value_t = PrefillKernel::Dense)]
    pub prefill_kernel: PrefillKernel,
    /// CPU threads [default: RAYON_NUM_THREADS when set, else the number of physical cores].
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Run `nanollm generate`.
pub fn run(args: GenerateArgs) -> Result<ExitCode> {
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: resolve_seed(args.fixed_seed(), args.temperature),
        repeat_penalty: args.repeat_penalty,
        repeat_last_n: args.repeat_last_n,
    };
    sampling.validate()?;
    warn_ineffective(&args);
    if args.max_new_tokens == 0 {
        bail!("--max-new-tokens 0: must be at least 1");
    }
    let cache = cache_config(&args.kv_cache_dtype, args.block_size)?;
    let threads = process::init_threads(args.threads)?;
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
    // A drawn seed is reported so the run can be repeated (the stats and --json carry it
    // too), as llama.cpp logs its sampler seed.
    let drawn = args.fixed_seed().is_none() && !request.sampling.is_greedy();
    if drawn && !(args.json || args.show_stats || args.roofline) {
        let seed = request.sampling.seed;
        eprintln!("seed {seed} (drawn at random; --seed {seed} repeats this run)");
    }
    let interrupt = process::interrupt_flag();
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
    } else if !gen.text.ends_with('\n') {
        write_stdout("\n")?;
    }
    // With --json too: the document on stdout, the human-readable stats on stderr.
    if args.show_stats || args.roofline {
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
    // Ctrl-C after the last token (during the roofline measurement) also exits 130.
    let stopped = interrupt.load(std::sync::atomic::Ordering::SeqCst);
    Ok(match gen.finish_reason {
        FinishReason::Interrupted => ExitCode::from(130),
        _ if stopped => ExitCode::from(130),
        _ => ExitCode::SUCCESS,
    })
}

impl GenerateArgs {
    /// The fixed seed `--seed` gives, if any (`None` without it or for `-1`).
    pub fn fixed_seed(&self) -> Option<u64> {
        match self.seed {
            Some(SeedArg::Fixed(s)) => Some(s),
            _ => None,
        }
    }
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
        (Some(p), None) => return Ok(p.clone()),
        (None, None) => bail!("no prompt: give PROMPT, --prompt-file FILE, or - to read stdin"),
    };
    // A file or stdin may start with a UTF-8 byte-order mark (Windows editors write one): it
    // marks the encoding, it is not text (run-batch drops it from its input too).
    let prompt = match prompt.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => prompt,
    };
    Ok(prompt)
}
