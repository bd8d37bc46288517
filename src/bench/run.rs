//! Running a [`BenchPlan`]: one greedy generation per (mode, prompt length, run), each
//! recorded as a [`RunSample`].
use crate::bench::plan::BenchMode;
use crate::bench::plan::{BenchPlan, Scenario};
use crate::bench::text::PromptText;
use crate::engine::spec::SpecChoice;
use crate::engine::{self, Generation, Percentiles, Request, SamplingParams};
use crate::model::{Decoder, Tokenizer};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};

/// One generated token of a run: where it sits and how long its step took.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepSample {
    /// 0 for the first generated token (its latency is the TTFT: prefill + sampling).
    pub index: usize,
    /// The token's position in the sequence (prompt length + index).
    pub position: usize,
    /// Time since the previous token, or since the start for the first (ms).
    pub latency_ms: f64,
}

/// Everything measured in one run (definitions as in vLLM's benchmark, see
/// [`crate::engine::stats`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSample {
    /// Decode mode.
    pub mode: BenchMode,
    /// Prompt length (tokens).
    pub prompt_len: usize,
    /// 1-based index among the measured runs of this (mode, prompt length).
    pub run: usize,
    /// Tokens generated (= the plan's `gen_len`).
    pub generated_tokens: usize,
    /// Time to first token (ms).
    pub ttft_ms: f64,
    /// The prefill forward pass alone (ms).
    pub prefill_ms: f64,
    /// Prompt tokens / prefill time (tokens/s).
    pub prefill_tokens_per_s: f64,
    /// Time per output token after the first (ms).
    pub tpot_ms: f64,
    /// Inter-token latencies (ms).
    pub itl: Percentiles,
    /// End-to-end latency (ms).
    pub e2el_ms: f64,
    /// (generated − 1) / (E2EL − TTFT) (tokens/s).
    pub decode_tokens_per_s: f64,
    /// Tokens in the KV cache at the end (prompt + generated − 1).
    pub kv_tokens: usize,
    /// Bytes of the KV blocks the sequence held at the end (a hybrid cache: its sliding
    /// groups only their window's blocks).
    pub kv_bytes_held: u64,
    /// Bytes a cache keeping every layer's blocks would hold for those tokens.
    pub kv_bytes_full_cache: u64,
    /// The generated token ids.
    pub tokens: Vec<u32>,
    /// Per-token positions and step latencies.
    pub steps: Vec<StepSample>,
}

impl RunSample {
    /// Record a finished generation. Errors: fewer than two tokens (no TPOT).
    pub fn from_generation(
        mode: BenchMode,
        prompt_len: usize,
        run: usize,
        gen: &Generation,
    ) -> Result<RunSample> {
        let s = &gen.stats;
        let (Some(tpot_ms), Some(decode_tokens_per_s)) = (s.tpot_ms, s.decode_tokens_per_s) else {
            bail!("{} run with a {prompt_len}-token prompt generated {} token(s); TPOT needs at least 2", mode.name(), s.generated_tokens);
        };
        Ok(RunSample {
            mode,
            prompt_len,
            run,
            generated_tokens: s.generated_tokens,
            ttft_ms: s.ttft_ms,
            prefill_ms: s.prefill_ms,
            prefill_tokens_per_s: s.prefill_tokens_per_s,
            tpot_ms,
            itl: s.itl,
            e2el_ms: s.e2el_ms,
            decode_tokens_per_s,
            kv_tokens: s.kv_cache.tokens,
            kv_bytes_held: s.kv_cache.bytes_held,
            kv_bytes_full_cache: s.kv_cache.bytes_full_cache,
            tokens: gen.tokens.clone(),
            steps: gen
                .steps
                .iter()
                .map(|ev| StepSample {
                    index: ev.index,
                    position: ev.position,
                    latency_ms: ev.latency_ms,
                })
                .collect(),
        })
    }
}

/// Which run of a scenario is going on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLabel {
    /// A warm-up run (not recorded).
    pub warmup: bool,
    /// 1-based index among the warm-up or the measured runs.
    pub index: usize,
    /// How many warm-up or measured runs the scenario has.
    pub of: usize,
}

/// Hooks for progress display; every method does nothing by default.
pub trait Observer {
    /// A run is about to start.
    fn run_started(&mut self, _scenario: Scenario, _label: RunLabel) {}
    /// A token was generated.
    fn step(&mut self) {}
    /// A run finished (warm-up runs too).
    fn run_finished(&mut self, _scenario: Scenario, _label: RunLabel, _sample: &RunSample) {}
}

/// An observer that shows nothing.
pub struct Silent;
impl Observer for Silent {}

/// How a plan ended.
#[derive(Debug, Clone)]
pub enum PlanOutcome {
    /// Every run finished: the measured samples, in the order run.
    Finished(Vec<RunSample>),
    /// Ctrl-C stopped it.
    Interrupted,
}

/// Run `plan` (its `spec` mode with `draft` when it uses a draft model): for each prompt length, for each mode, `warmup` unrecorded runs then `runs`
/// measured runs, all greedy, with end-of-sequence tokens ignored (`ignore_eos`, as
/// llama-bench and vLLM's benchmark do) so every run generates exactly `gen_len` tokens.
///
/// Errors: a prompt that cannot be cut from `text`, a run that ends before `gen_len` tokens
/// (context full), tensor failures.
pub fn run_plan(
    (decoder, draft): (&Decoder, Option<&Decoder>),
    tokenizer: &Tokenizer,
    text: &PromptText,
    plan: &BenchPlan,
    interrupt: &AtomicBool,
    observer: &mut dyn Observer,
    trace: Option<&crate::trace::Tracer>,
) -> Result<PlanOutcome> {
    let mut samples = Vec::new();
    for scenario in plan.scenarios() {
        let prompt_ids = text.prompt(scenario.prompt_len)?;
        let labels = (1..=plan.warmup)
            .map(|index| RunLabel {
                warmup: true,
                index,
                of: plan.warmup,
            })
            .chain((1..=plan.runs).map(|index| RunLabel {
                warmup: false,
                index,
                of: plan.runs,
            }));
        for label in labels {
            observer.run_started(scenario, label);
            let request = Request {
                prompt_ids: prompt_ids.clone(),
                max_new_tokens: plan.gen_len,
                sampling: SamplingParams::greedy(),
                mode: scenario.mode.decode_mode(),
                cache: plan.cache,
                stop_token_ids: Vec::new(),
                stop_strings: Vec::new(),
                ignore_eos: true,
                speculative: match (scenario.mode, &plan.spec) {
                    (BenchMode::Spec, Some(s)) => SpecChoice::On(*s),
                    _ => SpecChoice::Off,
                },
            };
            let started = std::time::Instant::now();
            let gen =
                engine::generate_with_draft(decoder, draft, tokenizer, &request, interrupt, |_| {
                    observer.step();
                    Ok(())
                })
                .with_context(|| {
                    format!(
                        "{} run with a {}-token prompt",
                        scenario.mode.name(),
                        scenario.prompt_len
                    )
                })?;
            if let Some(t) = trace {
                let name = format!(
                    "{}, {}-token prompt, {} {}/{}",
                    scenario.mode.name(),
                    scenario.prompt_len,
                    if label.warmup { "warm-up" } else { "run" },
                    label.index,
                    label.of
                );
                let events = crate::trace::generation::generation_events(&gen, started);
                t.process(&name).send(events);
            }
            if interrupt.load(Ordering::Relaxed) {
                return Ok(PlanOutcome::Interrupted);
            }
            if gen.tokens.len() != plan.gen_len {
                bail!(
                    "{} run with a {}-token prompt stopped after {} of {} tokens ({:?})",
                    scenario.mode.name(),
                    scenario.prompt_len,
                    gen.tokens.len(),
                    plan.gen_len,
                    gen.finish_reason
                );
            }
            let sample =
                RunSample::from_generation(scenario.mode, scenario.prompt_len, label.index, &gen)?;
            observer.run_finished(scenario, label, &sample);
            if !label.warmup {
                samples.push(sample);
            }
        }
    }
    Ok(PlanOutcome::Finished(samples))
}
