//! `nanollm generate`: stream a completion and show its per-token stats.
use crate::cli::generate_args::GenerateArgs;
use crate::cli::generate_stats::{json_report, render_stats, run_roofline};
use crate::cli::output::write_stdout;
use crate::cli::seed::resolve_seed;
use crate::engine::spec::SpecChoice;
use crate::engine::{self, FinishReason, Request, SamplingParams};
use crate::flags::cache_config;
use crate::model::chat::{self, ChatOptions};
use crate::model::chat::{prompt_messages, NO_TEMPLATE_FOR_CHAT};
use crate::model::{source, LoadOptions};
use crate::process;
use anyhow::{bail, Context, Result};
use std::io::Read;
use std::process::ExitCode;
use std::time::Instant;

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
    let speculative = args.spec.speculative()?;
    if speculative.is_some() && args.decode == engine::DecodeMode::Naive {
        bail!("--spec needs a KV cache to verify drafts in: it does not combine with --decode naive, which recomputes the whole sequence every step");
    }
    let cache = cache_config(&args.kv_cache_dtype, args.block_size, args.swa_full)?
        .with_evict(args.kv_evict.as_deref())?;
    args.trace.check(None)?;
    if let (Some(trace), Some(input)) = (&args.trace.trace, &args.prompt_file) {
        crate::cli::clobber::check_not_input("--trace", trace, "--prompt-file", input)?;
    }
    let threads = process::init_threads(args.threads)?;
    let prompt = read_prompt(&args)?;
    let path = source::resolve_at(args.model.as_deref(), args.revision.as_deref())?;
    args.trace.check(Some(&path))?;
    let t_load = Instant::now();
    let opts = LoadOptions {
        dense_prefill: args.prefill_kernel.loads_dense_copy(),
        dtype: args.dtype,
        quantize: args.quantize,
    };
    let mut model = source::load_with(&path, &candle_core::Device::Cpu, opts)?;
    model
        .decoder
        .set_dense_prompt_min_tokens(args.prefill_kernel.dense_prompt_min_tokens());
    let draft = args.spec.load_draft(&model)?;
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
        speculative: match speculative {
            Some(s) => SpecChoice::On(s),
            None => SpecChoice::Off,
        },
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
    let tracer = args.trace.start()?;
    let started = Instant::now();
    let gen = engine::generate_with_draft(
        &model.decoder,
        draft.as_ref().map(|d| &d.decoder),
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
    if let Some(t) = tracer {
        t.process("nanollm generate")
            .send(crate::trace::generation::generation_events(&gen, started));
        t.finish()?;
    }
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
