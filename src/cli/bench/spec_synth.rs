//! `nanollm bench --spec-synth-rates`: speculative decoding's break-even on this machine —
//! decode tokens/s against the acceptance rate of synthetic drafts, per draft length k
//! ([`crate::bench::spec_synth`]).
use super::args::BenchArgs;
use super::output::{check_outputs, check_outputs_not_model, interrupted, is_stdout, write_output};
use crate::bench::spec_synth::{self, SynthPlan};
use crate::bench::text::PromptText;
use crate::engine::spec::MAX_SPEC_TOKENS;
use crate::model::source;
use crate::process;
use crate::units::parse_tokens;
use anyhow::{bail, Result};
use std::process::ExitCode;

/// Run the sweep and print its table (stdout; stderr when `--json -` takes stdout).
///
/// Errors: a rate outside 0 ..= 1, a k of 0 or above 16, more than one prompt length, bad
/// outputs, a model that does not load.
pub fn run(args: BenchArgs) -> Result<ExitCode> {
    let rates = args.spec_synth_rates.clone();
    if let Some(r) = rates.iter().find(|r| !(0.0..=1.0).contains(*r)) {
        bail!("--spec-synth-rates {r}: a rate is between 0 and 1");
    }
    let ks = if args.spec_synth_k.is_empty() {
        vec![1, 2, 4, 8]
    } else {
        args.spec_synth_k.clone()
    };
    if let Some(k) = ks.iter().find(|&&k| k == 0 || k > MAX_SPEC_TOKENS) {
        bail!("--spec-synth-k {k}: a draft length is 1 to {MAX_SPEC_TOKENS}");
    }
    if args.prompt_len.len() > 1 {
        bail!("--prompt-len: --spec-synth-rates takes one prompt length");
    }
    let prompt_len = parse_tokens("--prompt-len", args.prompt_len.first().map_or("128", |s| s))?;
    let gen_len = parse_tokens("--gen-len", &args.gen_len)?;
    if gen_len < 3 {
        bail!("--gen-len {gen_len}: must be at least 3 tokens (drafts start after the first token, and one is left for the last step)");
    }
    if args.runs == 0 {
        bail!("--runs 0: must be at least 1");
    }
    for flag in args.engine.spec.given() {
        eprintln!("warning: {flag} has no effect with --spec-synth-rates (the sweep drafts synthetically, every draft verified, k from --spec-synth-k)");
    }
    if args.trace.trace.is_some() {
        eprintln!("warning: --trace has no effect with --spec-synth-rates");
    }
    check_outputs(args.json.as_deref(), args.plot.as_deref())?;
    let threads = process::init_threads(args.threads)?;
    let path = source::resolve(args.model.as_deref())?;
    check_outputs_not_model(&args, &path)?;
    let model = args.prefill_kernel.load(&path, args.quantize)?;
    let context = model.config().max_position_embeddings;
    if prompt_len + gen_len > context {
        bail!("--prompt-len {prompt_len} with --gen-len {gen_len}: needs {} positions, beyond the model's context window of {context} tokens", prompt_len + gen_len);
    }
    let text = PromptText::tokenize(&model.tokenizer)?;
    let plan = SynthPlan {
        prompt_ids: text.prompt(prompt_len)?,
        gen_len,
        rates,
        ks,
        runs: args.runs,
        cache: crate::flags::cache_config(&args.kv_cache_dtype, args.block_size, args.swa_full)?,
    };
    let interrupt = process::interrupt_flag();
    let report = spec_synth::run(
        &model.decoder,
        &model.tokenizer,
        &plan,
        interrupt,
        |label| {
            eprintln!("{label}");
        },
    )?;
    let Some(report) = report else {
        return interrupted();
    };
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let subtitle = format!(
        "{name}, {prompt_len}-token prompt, {gen_len} tokens, {} threads, {} rounds",
        threads, plan.runs
    );
    let table = format!("{subtitle}\n{}", spec_synth::table(&report));
    let json_to_stdout = args.json.as_deref().is_some_and(is_stdout);
    if json_to_stdout {
        eprint!("{table}");
    } else {
        crate::cli::output::write_stdout(&table)?;
    }
    if let Some(p) = &args.plot {
        write_output("--plot", p, &spec_synth::svg::render(&report, &subtitle))?;
    }
    if let Some(p) = &args.json {
        let doc = serde_json::json!({ "plan": plan, "threads": threads, "model": path.display().to_string(), "report": report });
        write_output("--json", p, &(serde_json::to_string_pretty(&doc)? + "\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}
