//! `nanollm bench --concurrency …` and `--scenario …`: the serving benchmarks on the batched
//! engine ([`crate::bench::serving`]): arguments, one warm-up, tables and JSON.
use super::args::{BenchArgs, ScenarioName};
use super::output::{
    check_outputs, check_outputs_not_model, check_request_rate, check_trace, interrupted,
    is_stdout, write_output,
};
use crate::bench::machine::Machine;
use crate::bench::serving::chat::{self as chat_bench, ChatPlan};
use crate::bench::serving::chunked::{self, ChunkedPlan};
use crate::bench::serving::concurrency::{self, ConcurrencyPlan};
use crate::bench::serving::prefix::{self, SharedPrefixPlan};
use crate::bench::serving::{serve, BenchRequest};
use crate::bench::text::PromptText;
use crate::cli::output::write_stdout;
use crate::engine::llm_engine::EngineConfig;
use crate::flags::cache_config;
use crate::model::source;
use crate::process;
use crate::roofline::cpu_times::CpuTimes;
use crate::units::parse_tokens;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::process::ExitCode;

/// Exit status when a check (same tokens, no leaked block) failed.
const EXIT_CHECK_FAILED: u8 = 3;

/// Run the serving benchmark `args` asks for.
pub fn run(args: BenchArgs) -> Result<ExitCode> {
    if !args.concurrency.is_empty() && args.scenario.is_some() {
        bail!("--concurrency and --scenario: give one of them");
    }
    if args.plot.is_some()
        && matches!(
            args.scenario,
            Some(ScenarioName::SharedPrefix | ScenarioName::Chat)
        )
    {
        bail!("--plot: this scenario runs requests one after another (no batch to chart); its per-request TTFTs are in the table and --json");
    }
    check_outputs(args.json.as_deref(), args.plot.as_deref())?;
    check_trace(&args)?;
    check_request_rate(args.request_rate)?;
    let prompt_len = match &args.prompt_len[..] {
        [] => 128,
        [one] => parse_tokens("--prompt-len", one)?,
        _ => bail!("--prompt-len: give one length with --concurrency or --scenario"),
    };
    let gen_len = parse_tokens("--gen-len", &args.gen_len)?;
    let cache = cache_config(&args.kv_cache_dtype, args.block_size, args.swa_full)?
        .with_evict(args.kv_evict.as_deref())?;
    // Flag checks that need no model: before anything loads or runs.
    let conc_plan = (!args.concurrency.is_empty()).then(|| ConcurrencyPlan {
        levels: args.concurrency.clone(),
        num_prompts: args
            .num_prompts
            .unwrap_or(args.concurrency.iter().copied().max().unwrap_or(1)),
        prompt_len,
        gen_len,
        request_rate: args.request_rate.filter(|r| r.is_finite()),
    });
    if let Some(plan) = &conc_plan {
        plan.validate()?;
    }
    if gen_len == 0 {
        bail!("--gen-len 0: must be at least 1 token");
    }
    let shared_plan = match args.scenario {
        Some(ScenarioName::SharedPrefix) => Some(SharedPrefixPlan {
            prefix_len: parse_tokens("--prefix-len", args.prefix_len.as_deref().unwrap_or("1k"))?,
            suffix_len: parse_tokens("--suffix-len", args.suffix_len.as_deref().unwrap_or("64"))?,
            requests: args.requests.unwrap_or(16),
            gen_len,
        }),
        _ => None,
    };
    if let Some(plan) = &shared_plan {
        plan.validate(cache.block_size)?;
    }
    let chat_plan = ChatPlan {
        turns: args.turns.unwrap_or(8),
        gen_len,
    };
    if args.scenario == Some(ScenarioName::Chat) {
        chat_plan.validate()?;
    }
    let chunked_plan = match args.scenario {
        Some(ScenarioName::ChunkedPrefill) => Some(ChunkedPlan {
            decoders: args.requests.unwrap_or(4),
            prompt_len,
            gen_len,
            long_prompt_len: parse_tokens(
                "--long-prompt-len",
                args.long_prompt_len.as_deref().unwrap_or("4k"),
            )?,
        }),
        _ => None,
    };
    if let Some(plan) = &chunked_plan {
        plan.validate()?;
    }
    let threads = process::init_threads(args.threads)?;
    let path = source::resolve(args.model.as_deref())?;
    check_outputs_not_model(&args, &path)?;
    let mut model = args.prefill_kernel.load(&path, args.quantize)?;
    args.mla_path.apply(&mut model.decoder)?;
    let mut config = args.engine.engine_config(model.config(), cache)?;
    if config.speculative.is_some_and(|s| s.uses_draft_model()) {
        bail!("--spec draft: bench's serving scenarios run without a draft model; measure it with bench --compare kv-cache,spec, run-batch or serve");
    }
    // The cache scenarios run with the prefix cache on, then off, whatever the flag says:
    // the disk tier (a tier of the prefix cache) is checked as for the "on" run.
    if matches!(
        args.scenario,
        Some(ScenarioName::SharedPrefix | ScenarioName::Chat)
    ) {
        config.scheduler.enable_prefix_caching = true;
    }
    let config = args.engine.offload.apply(
        config,
        &path,
        model.config(),
        args.prefill_kernel,
        args.quantize,
    )?;
    if let Some(plan) = &shared_plan {
        plan.check_fits(config.max_model_len)?;
    }
    if let Some(plan) = &conc_plan {
        plan.check_fits(config.max_model_len)?;
    }
    let text = PromptText::tokenize(&model.tokenizer)?;
    let interrupt = process::interrupt_flag();
    let mut machine = Machine::detect(threads);
    // Warm-up: page the weights in and start the threads (without the disk tier, so that
    // the warm-up's blocks are not on disk for the measured runs' first, cold request).
    let warm_config = EngineConfig {
        offload: None,
        ..config
    };
    let warm = [BenchRequest {
        prompt_ids: text.window(0, 16)?,
        max_tokens: 4,
        arrival_s: 0.0,
        ignore_eos: true,
        after_decoding: false,
    }];
    serve(
        &model.decoder,
        &model.tokenizer,
        warm_config,
        &warm,
        interrupt,
        None,
    )
    .map_err(|e| args.engine.blame_kv_mem(config.max_model_len, e))?;
    let cpu_before = CpuTimes::now();
    let settings = json!({
        "model": path.display().to_string(),
        "threads": threads,
        "kv_cache_dtype": cache.dtype,
        "block_size": cache.block_size,
        "max_num_batched_tokens": config.scheduler.max_num_batched_tokens,
        "max_model_len": config.max_model_len,
        "kv_blocks": config.num_blocks,
        "enable_prefix_caching": config.scheduler.enable_prefix_caching,
        "sampling": "greedy",
    });
    if let Some(plan) = &chunked_plan {
        plan.check_engine(&config)?;
    }
    // The trace begins after the warm-up: the runs measured, one process each.
    let tracer = args.trace.start()?;
    let trace = tracer.as_ref();
    eprintln!("running… (Ctrl-C stops without a report)");
    let (text_out, result, ok, plot_runs) = if let Some(plan) = conc_plan {
        for &c in &plan.levels {
            if c > plan.num_prompts {
                eprintln!(
                    "warning: --concurrency {c} with --num-prompts {}: at most {} requests run at once",
                    plan.num_prompts, plan.num_prompts
                );
            }
        }
        let Some(levels) = concurrency::run_levels(
            &model.decoder,
            &model.tokenizer,
            config,
            &text,
            &plan,
            interrupt,
            trace,
        )?
        else {
            return interrupted();
        };
        let ok = levels
            .iter()
            .all(|l| l.identical_to_first_level && l.run.blocks_leaked == 0);
        let table = format!(
            "{} of {} prompt + {} generated tokens per level{}\n{}",
            crate::units::count_of(plan.num_prompts, "request"),
            plan.prompt_len,
            plan.gen_len,
            plan.request_rate
                .map_or(", all arriving at once".to_string(), |r| format!(
                    ", Poisson arrivals at {r} requests/s"
                )),
            concurrency::render(&levels)
        );
        let runs: Vec<(String, Vec<_>)> = levels
            .iter()
            .map(|l| {
                (
                    format!("concurrency {}", l.concurrency),
                    l.run.steps.clone(),
                )
            })
            .collect();
        (
            table,
            json!({"concurrency": plan, "levels": levels}),
            ok,
            runs,
        )
    } else if let Some(plan) = shared_plan {
        let Some(r) = prefix::shared_prefix(&model, config, &text, plan, interrupt, trace)? else {
            return interrupted();
        };
        let ok = r.identical && r.blocks_leaked == [0, 0];
        (
            prefix::render_shared_prefix(&r),
            json!({"shared_prefix": r}),
            ok,
            Vec::new(),
        )
    } else if let Some(plan) = chunked_plan {
        let Some(r) = chunked::run(
            &model.decoder,
            &model.tokenizer,
            config,
            &text,
            plan,
            interrupt,
            trace,
        )?
        else {
            return interrupted();
        };
        let ok =
            r.identical && r.chunked.run.blocks_leaked == 0 && r.one_shot.run.blocks_leaked == 0;
        let runs = vec![
            (
                format!("chunked ({} tokens/step)", r.chunked.max_num_batched_tokens),
                r.chunked.run.steps.clone(),
            ),
            (
                format!(
                    "one-shot ({} tokens/step)",
                    r.one_shot.max_num_batched_tokens
                ),
                r.one_shot.run.steps.clone(),
            ),
        ];
        (chunked::render(&r), json!({"chunked_prefill": r}), ok, runs)
    } else {
        match args.scenario {
            Some(ScenarioName::Chat) => {
                let Some(r) = chat_bench::chat(&model, config, chat_plan, interrupt, trace)? else {
                    return interrupted();
                };
                let ok = r.identical;
                (
                    chat_bench::render_chat(&r),
                    json!({"chat": r}),
                    ok,
                    Vec::new(),
                )
            }
            _ => bail!("nothing to run"),
        }
    };
    machine.record_cpu_use(cpu_before, CpuTimes::now());
    if let Some(t) = tracer {
        t.finish()?;
    }
    if let Some(file) = &args.json {
        let doc = json!({"settings": settings, "machine": machine, "result": result});
        let doc = serde_json::to_string_pretty(&doc).context("cannot serialise the report")? + "\n";
        write_output("--json", file, &doc)?;
    }
    if let Some(file) = &args.plot {
        let runs: Vec<(String, &[_])> =
            plot_runs.iter().map(|(l, s)| (l.clone(), &s[..])).collect();
        let subtitle = format!(
            "{} · {} · KV {} in blocks of {}",
            path.file_name()
                .map_or(String::new(), |f| f.to_string_lossy().into_owned()),
            crate::units::count_of(threads, "thread"),
            cache.dtype.name(),
            cache.block_size
        );
        let svg = crate::bench::serving::svg::render(
            &runs,
            "Engine steps: latency and batch size",
            &subtitle,
        );
        write_output("--plot", file, &svg)?;
    }
    if [&args.json, &args.plot]
        .iter()
        .any(|p| p.as_deref().is_some_and(is_stdout))
    {
        eprint!("{text_out}");
    } else {
        write_stdout(&text_out)?;
    }
    if !ok {
        eprintln!(
            "warning: a check failed: outputs differ between settings or blocks leaked (see above)"
        );
        return Ok(ExitCode::from(EXIT_CHECK_FAILED));
    }
    Ok(ExitCode::SUCCESS)
}
