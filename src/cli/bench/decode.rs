//! `nanollm bench --compare …`: several decode modes on the same prompts, their latency
//! compared, with the roofline of each phase.
use super::args::BenchArgs;
use super::machine::measure_limits;
use super::output::{
    check_outputs, check_outputs_not_model, check_trace, interrupted, is_stdout, write_output,
};
use crate::bench::machine::Machine;
use crate::bench::plan::parse_modes;
use crate::bench::roofline::BenchRoofline;
use crate::bench::roofline_svg::{render_roofline_svg, stack};
use crate::bench::run::{run_plan, Observer, PlanOutcome, RunLabel};
use crate::bench::svg::render_svg;
use crate::bench::text::{PromptText, TEXT_NAME};
use crate::bench::{BenchPlan, Report, RunSample, Scenario, Settings};
use crate::cli::output::write_stdout;
use crate::model::source;
use crate::process;
use crate::roofline;
use crate::roofline::cpu_times::CpuTimes;
use crate::units::parse_tokens;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::process::ExitCode;

/// Exit status when the compared modes generated different tokens.
pub const EXIT_TOKENS_DIFFER: u8 = 3;

/// Columns of the terminal step-latency chart.
const CHART_WIDTH: usize = 48;

/// Run the decode-mode benchmark: `--compare` modes on prompts cut from the shipped text,
/// the machine's limits measured before and after, the latency and roofline tables, `--json`
/// and `--plot`.
///
/// Errors: bad flags, a model that does not load, a plan that does not fit its context, an
/// output that cannot be written. Different tokens between modes exit with 3.
pub fn run(args: BenchArgs) -> Result<ExitCode> {
    let plan = BenchPlan {
        modes: evict_modes(&args, parse_modes(&args.compare)?)?,
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
        cache: crate::flags::cache_config(&args.kv_cache_dtype, args.block_size, args.swa_full)?
            .with_evict(args.kv_evict.as_deref())?,
        spec: None,
    };
    let mut plan = plan;
    plan.spec = spec_settings(&args, &plan.modes)?;
    plan.validate()?;
    check_outputs(args.json.as_deref(), args.plot.as_deref())?;
    check_trace(&args)?;
    let threads = process::init_threads(args.threads)?;
    let path = source::resolve(args.model.as_deref())?;
    check_outputs_not_model(&args, &path)?;
    let loading = std::time::Instant::now();
    let mut model = args.prefill_kernel.load(&path, args.quantize)?;
    args.mla_path.apply(&mut model.decoder)?;
    let draft = match &plan.spec {
        Some(s) if s.uses_draft_model() => {
            // `--draft-model` alone means `--spec draft` here (spec_settings).
            let mut flags = args.engine.spec.clone();
            flags.spec = Some(crate::flags::spec::SpecMethodArg::Draft);
            flags.load_draft(&model)?
        }
        _ => None,
    };
    let load_ms = loading.elapsed().as_secs_f64() * 1e3;
    let text = PromptText::tokenize(&model.tokenizer)?;
    plan.check_fits(model.config().max_position_embeddings, text.len())?;
    // What a dense prompt reads (a prompt auto runs on the quantized kernels is counted
    // with the decode matrices: BenchRoofline::new).
    let weights = roofline::weights::loaded_model_weights(
        &path,
        model.config(),
        model.decoder.weights(),
        args.prefill_kernel.loads_dense_copy(),
    )?;
    // The Ctrl-C handler from here on: during the first measurement too (1–2 s, not
    // interruptible inside), Ctrl-C then ends with the same message as later.
    let interrupt = process::interrupt_flag();
    let stopped = || interrupt.load(std::sync::atomic::Ordering::Relaxed);
    let measure = |again| measure_limits(true, again).with_working_set(weights.decode.total());
    let before = measure(false);
    if stopped() {
        return interrupted();
    }

    let mut machine = Machine::detect(threads);
    let cpu_before = CpuTimes::now();
    let mut progress = Progress::new(plan.total_tokens());
    let tracer = args.trace.start()?;
    let outcome = run_plan(
        (&model.decoder, draft.as_ref().map(|d| &d.decoder)),
        &model.tokenizer,
        &text,
        &plan,
        interrupt,
        &mut progress,
        tracer.as_ref(),
    );
    progress.bar.finish_and_clear();
    if let Some(t) = tracer {
        t.finish()?;
    }
    let samples = match outcome? {
        PlanOutcome::Finished(samples) => samples,
        PlanOutcome::Interrupted => return interrupted(),
    };

    // The machine line's "during the runs": up to here, not the measurement below.
    let cpu_runs_end = CpuTimes::now();
    // Again after the runs: on a shared machine the limits move within a minute, and the
    // roofs are the better of the two (BenchRoofline::new).
    let after = measure(true);
    if stopped() {
        return interrupted();
    }

    let settings = Settings {
        model: path.display().to_string(),
        baseline: plan.baseline(),
        plan,
        threads,
        prefill_kernel: format!("{:?}", args.prefill_kernel).to_lowercase(),
        mla_path: model
            .config()
            .mla
            .map(|_| format!("{:?}", args.mla_path).to_lowercase()),
        sampling: "greedy".to_string(),
        ignore_eos: true,
        prompt_text: TEXT_NAME.to_string(),
        prompt_text_tokens: text.len(),
        load_ms,
    };
    machine.record_cpu_use(cpu_before, cpu_runs_end);
    let mut report = Report::new(settings, machine, samples);
    report.roofline = Some(BenchRoofline::new(
        model.config(),
        args.mla_path.into(),
        weights,
        |len| model.decoder.prompt_is_dense(len),
        vec![before, after],
        &report.settings.plan,
        &report.runs,
    )?);
    if let Some(file) = &args.json {
        let doc =
            serde_json::to_string_pretty(&report).context("cannot serialise the report")? + "\n";
        write_output("--json", file, &doc)?;
    }
    if let Some(file) = &args.plot {
        let subtitle = format!(
            "{} · mean of {} run(s) · {} generated tokens · {}",
            path.file_name()
                .map_or(String::new(), |f| f.to_string_lossy().into_owned()),
            report.settings.plan.runs,
            report.settings.plan.gen_len,
            crate::units::count_of(threads, "thread")
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

/// With `--kv-evict` only kv-cache runs can evict: the default `naive,kv-cache` becomes
/// kv-cache alone; naive, swa-full or spec named in `--compare` are refused up front.
///
/// Errors: such a mode with `--kv-evict`.
fn evict_modes(
    args: &BenchArgs,
    modes: Vec<crate::bench::plan::BenchMode>,
) -> Result<Vec<crate::bench::plan::BenchMode>> {
    use crate::bench::plan::BenchMode;
    if args.kv_evict.is_none() {
        return Ok(modes);
    }
    if args.compare == ["naive", "kv-cache"] {
        return Ok(vec![BenchMode::KvCache]);
    }
    if let Some(m) = modes.iter().find(|&&m| m != BenchMode::KvCache) {
        bail!(
            "--kv-evict with --compare {}: only kv-cache runs evict (naive recomputes, swa-full masks by position, spec verifies across eviction points); use --compare kv-cache",
            m.name()
        );
    }
    Ok(modes)
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

/// Progress on stderr: a bar over every generated token (hidden when stderr is not a
/// terminal, or is one that cannot move the cursor: `TERM=dumb`) and one line per finished
/// run.
struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new(total_tokens: u64) -> Progress {
        let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
        let target = match dumb {
            true => ProgressDrawTarget::hidden(),
            false => ProgressDrawTarget::stderr(),
        };
        let bar = ProgressBar::with_draw_target(Some(total_tokens), target);
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

/// The `spec` mode's settings: `--spec*`'s (prompt lookup when `--spec` is not given). The
/// flags without `spec` in `--compare` get a warning each (they change nothing then).
///
/// Errors: a `--spec*` value out of range.
fn spec_settings(
    args: &BenchArgs,
    modes: &[crate::bench::plan::BenchMode],
) -> Result<Option<crate::engine::spec::Speculative>> {
    if !modes.contains(&crate::bench::plan::BenchMode::Spec) {
        for flag in args.engine.spec.given() {
            eprintln!("warning: {flag} has no effect without spec in --compare (e.g. --compare kv-cache,spec)");
        }
        return Ok(None);
    }
    let mut flags = args.engine.spec.clone();
    flags.spec.get_or_insert(if flags.draft_model.is_some() {
        crate::flags::spec::SpecMethodArg::Draft
    } else {
        crate::flags::spec::SpecMethodArg::Ngram
    });
    flags.speculative()
}
