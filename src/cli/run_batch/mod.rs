//! `nanollm run-batch -i requests.jsonl -o results.jsonl`: many requests through the batched
//! engine at once (in the spirit of vLLM's `run-batch`), one JSON result per line, in input
//! order, and the aggregate on stderr.
mod report;

use crate::cli::batch_input::{parse_jsonl, BatchRequest};
use crate::cli::clobber::{check_not_input, check_not_model};
use crate::cli::outfile::{check_writable, write_whole};
use crate::cli::output::write_stdout;
use crate::engine::llm_engine::{Finished, LlmEngine};
use crate::engine::validate::RequestError;
use crate::engine::{DecodeMode, FinishReason, Request};
use crate::flags::EngineArgs;
use crate::model::source;
use crate::process;
use anyhow::{Context, Result};
use clap::Args;
use report::{aggregate, result_json};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Instant;

const AFTER_HELP: &str = "\
Input: one JSON object per line (blank lines skipped), either a request itself or an OpenAI
batch line whose \"body\" is one ({\"custom_id\": ..., \"body\": {...}}):
  {\"prompt\": \"Once upon a time\", \"max_tokens\": 32}
  {\"messages\": [{\"role\": \"user\", \"content\": \"Why is the sky blue?\"}], \"temperature\": 0.7, \"seed\": 1}
\"prompt\" is raw text or a list of token ids (as /v1/completions); \"messages\" go through the
model's chat template (as /v1/chat/completions). Optional: max_tokens (or
max_completion_tokens; default --max-tokens, capped at the context left after the prompt),
temperature (default 0 = greedy), top_p, top_k, seed, stop (a string or a list), custom_id,
vLLM's ignore_eos and stop_token_ids, and speculative (false, true or {\"num_speculative_tokens\":
K, \"prompt_lookup_min\": N, \"prompt_lookup_max\": N, \"force\": bool}; default --spec). A batch line's \"url\" (/v1/completions or
/v1/chat/completions, whose body needs a prompt or messages) and \"method\" (POST) are
checked when given; \"stream\": true is refused. Unknown fields are ignored. With temperature > 0
and no seed, a random seed is drawn and reported, so any result can be reproduced.

Output: one JSON object per input line, in input order: custom_id, index, text, token_ids,
finish_reason (OpenAI's: stop, length, abort; error for a request that failed alone, its
reason in \"error\", exit code 1 after every line is written), seed, usage {prompt_tokens,
completion_tokens, total_tokens, prompt_tokens_details.cached_tokens}, and the request's own
stats (TTFT, TPOT, E2EL, ITL, finish: eos, stop_string, length, context_full, interrupted or
error, preemptions). The aggregate (throughput, prefix-cache hit rate, peak KV blocks) goes to
stderr. All requests run concurrently, up to --max-num-seqs at a time. Ctrl-C (or SIGTERM,
SIGHUP) stops at the end of the current engine step: every line is still written, in input
order, the cut ones with finish_reason abort (stats.finish interrupted); exit code 130.

Examples:
  nanollm run-batch -i requests.jsonl -o results.jsonl
  nanollm run-batch -i requests.jsonl --max-num-seqs 4 --kv-mem 64MiB --max-model-len 2048 --no-enable-prefix-caching";

/// Arguments of `nanollm run-batch`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP, allow_negative_numbers = true)]
pub struct RunBatchArgs {
    /// JSONL file of requests; `-` reads stdin.
    #[arg(long, short = 'i', value_name = "FILE")]
    pub input: PathBuf,
    /// JSONL file for the results [default: stdout].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// A .gguf file, an HF model folder, or a hub id in the local HF cache [default: SmolLM2-135M-Instruct Q4_1 in the nanollm cache].
    #[arg(long, short = 'm', value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// max_tokens of requests that do not set it, capped at the context left after the prompt (--max-model-len − prompt tokens).
    #[arg(long, default_value_t = 256, value_name = "TOKENS", value_parser = crate::flags::token_count)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub runtime: crate::flags::RuntimeArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub trace: crate::trace::TraceArgs,
}

/// Run `nanollm run-batch`.
pub fn run(args: RunBatchArgs) -> Result<ExitCode> {
    let cache = args.runtime.cache()?;
    if args.max_tokens == 0 {
        anyhow::bail!("--max-tokens 0: must be at least 1");
    }
    if let Some(out) = args.output.as_ref().filter(|p| p.as_os_str() != "-") {
        check_writable("--output", out)?;
        if args.input.as_os_str() != "-" {
            check_not_input("--output", out, "--input", &args.input)?;
        }
    }
    args.trace.check(None)?;
    for (flag, path) in [("--output", &args.output), ("--trace", &args.trace.trace)] {
        if let Some(p) = path {
            args.engine.offload.check_not_output(flag, p)?;
        }
    }
    if let (Some(trace), Some(out)) = (&args.trace.trace, &args.output) {
        if crate::cli::clobber::same_file(trace, out) {
            anyhow::bail!("--trace {}: the same file as --output", trace.display());
        }
    }
    let text = read_input(&args.input)?;
    let batch = parse_jsonl(&text, args.max_tokens)?;
    let threads = process::init_threads(args.runtime.threads)?;
    let path = source::resolve_at(args.model.as_deref(), None)?;
    if let Some(out) = &args.output {
        check_not_model("--output", out, &path)?;
    }
    args.trace.check(Some(&path))?;
    if let (Some(trace), false) = (&args.trace.trace, args.input.as_os_str() == "-") {
        check_not_input("--trace", trace, "--input", &args.input)?;
    }
    let model = args
        .runtime
        .prefill_kernel
        .load(&path, args.runtime.quantize)?;
    let draft = args.engine.spec.load_draft(&model)?;
    let config = args.engine.engine_config_with(
        model.config(),
        draft.as_ref().map(|d| d.config()),
        cache,
    )?;
    let config = args.engine.offload.apply(
        config,
        &path,
        model.config(),
        args.runtime.prefill_kernel,
        args.runtime.quantize,
    )?;
    let max_model_len = config.max_model_len;
    // Refused with its own line, before the budget's context could claim it.
    let speculative = draft.is_some() || config.speculative.is_some();
    crate::engine::evict::check(&config.cache, speculative, model.config())?;
    let mut engine = LlmEngine::with_draft(
        &model.decoder,
        draft.as_ref().map(|d| &d.decoder),
        &model.tokenizer,
        config,
    )
    .map_err(|e| args.engine.blame_kv_mem(max_model_len, e))?;
    // Every prompt is tokenized (chat templates rendered) and checked before the first
    // request arrives, so each request's E2EL lies inside the run's duration.
    let mut requests = Vec::with_capacity(batch.len());
    let context = model.config().max_position_embeddings;
    for r in batch.iter() {
        let prompt_ids = r
            .prompt_ids(&model)
            .with_context(|| format!("--input line {}", r.line))?;
        let max_len = engine.config().max_model_len;
        let prompt_len = prompt_ids.len();
        // A line's own max_tokens past the context is refused (as vLLM does); the
        // --max-tokens default is capped at the context left after the prompt (vLLM's
        // default is that room itself; at least 1, so a prompt that leaves no room is
        // refused for its length).
        let max_new_tokens = if r.max_tokens_given {
            r.max_tokens
        } else {
            r.max_tokens.min(max_len.saturating_sub(prompt_len)).max(1)
        };
        let request = Request {
            prompt_ids,
            max_new_tokens,
            sampling: r.sampling.clone(),
            mode: DecodeMode::KvCache,
            cache,
            stop_token_ids: r.stop_token_ids.clone(),
            stop_strings: r.stop.clone(),
            ignore_eos: r.ignore_eos,
            speculative: r.speculative,
        };
        let request = engine
            .validate(request, r.max_tokens_given)
            .map_err(|e| refusal(e, r, context))?;
        requests.push(request);
    }
    let tracer = args.trace.start()?;
    let trace = tracer.as_ref().map(|t| t.process("nanollm run-batch"));
    engine.record_trace(trace.is_some());
    let interrupt = process::interrupt_flag();
    let t0 = Instant::now();
    let mut seq_of = Vec::new();
    for (i, request) in requests.into_iter().enumerate() {
        seq_of.push((engine.add(request), i));
    }
    let mut finished: Vec<Option<Finished>> = vec![None; batch.len()];
    let index_of = |id: usize| seq_of.iter().find(|(s, _)| *s == id).map(|&(_, i)| i);
    while engine.num_unfinished() > 0 {
        let done = if interrupt.load(Ordering::Relaxed) {
            engine.abort_all()?
        } else {
            engine.step(false)?.finished
        };
        if let Some(t) = &trace {
            t.send(engine.take_trace());
        }
        for f in done {
            if let Some(i) = index_of(f.seq_id) {
                finished[i] = Some(f);
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    drop(trace);
    if let Some(t) = tracer {
        t.finish()?;
    }
    let mut lines = String::new();
    for (r, f) in batch.iter().zip(&finished) {
        if let Some(f) = f {
            lines.push_str(&serde_json::to_string(&result_json(r, f))?);
            lines.push('\n');
        }
    }
    match &args.output {
        Some(p) if p.as_os_str() != "-" => write_whole("--output", p, lines.as_bytes())?,
        _ => write_stdout(&lines)?,
    }
    let done: Vec<&Finished> = finished.iter().flatten().collect();
    // The disk tier's queue written first, so its line counts every block.
    engine.flush_offload();
    eprint!("{}", aggregate(&engine, &done, wall, threads));
    let interrupted = done
        .iter()
        .any(|f| f.generation.finish_reason == FinishReason::Interrupted);
    let failed = done.iter().filter(|f| f.error.is_some()).count();
    if failed > 0 {
        eprintln!("error: {failed} of {} requests failed (their lines have \"error\"; the others completed)", done.len());
    }
    Ok(if interrupted {
        ExitCode::from(130)
    } else if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `--input` line `r`'s refusal: its length against `--max-model-len` (`context`: the
/// model's window, named when the limit is all of it) in run-batch's words, the rest in the
/// engine's, after the line number.
fn refusal(e: RequestError, r: &BatchRequest, context: usize) -> anyhow::Error {
    match e {
        RequestError::PromptTooLong { prompt, max_len } => {
            let fix = if max_len < context {
                "shorten the prompt or raise --max-model-len"
            } else {
                "shorten the prompt (that is the model's whole context)"
            };
            anyhow::anyhow!(
                "--input line {}: the prompt is {prompt} tokens, --max-model-len is {max_len}: {fix}",
                r.line
            )
        }
        RequestError::TooManyTokens {
            prompt,
            max_new_tokens,
            max_len,
        } => anyhow::anyhow!(
            "--input line {}: max_tokens {max_new_tokens} with a {prompt}-token prompt is more than --max-model-len {max_len} tokens (vLLM refuses this too): lower max_tokens",
            r.line
        ),
        other => anyhow::Error::from(other).context(format!("--input line {}", r.line)),
    }
}

/// The input file's text (`-`: stdin). Errors: unreadable, not UTF-8 (naming the first
/// line that is not), empty or only blank lines (naming the file).
fn read_input(path: &std::path::Path) -> Result<String> {
    let name = path.display();
    let bytes = if path.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::stdin()
            .read_to_end(&mut b)
            .context("--input -: cannot read stdin")?;
        b
    } else {
        let what = if path.is_file() {
            "cannot read it"
        } else if path.exists() {
            "not a file"
        } else {
            "no such file"
        };
        std::fs::read(path).with_context(|| format!("--input {name}: {what}"))?
    };
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let good = e.utf8_error().valid_up_to();
            let line = 1 + e.as_bytes()[..good].iter().filter(|&&b| b == b'\n').count();
            anyhow::bail!("--input {name} line {line}: is not UTF-8 text")
        }
    };
    // A UTF-8 byte-order mark (some editors write one) is not part of the first line.
    let text = text
        .strip_prefix('\u{feff}')
        .map(str::to_string)
        .unwrap_or(text);
    if text.trim().is_empty() {
        let what = if text.is_empty() { "empty" } else { "blank" };
        anyhow::bail!(
            "--input {name}: no request: the input is {what} (expected one JSON object per line)"
        );
    }
    Ok(text)
}
