//! `nanollm bench --spec-synth-rates`: speculative decoding's break-even on this machine.
//! Drafts are synthetic ([`Synthetic`]): the prompt's greedy continuation comes from a plain
//! run, and each draft is made right with a set probability per position, so decode tokens/s
//! can be measured against acceptance and the draft length k without a drafter's own cost
//! or luck. Plain and speculative runs alternate within each round (one run of each cell per
//! round), and every cell is reported against the plain runs of the same rounds.
pub mod svg;

use crate::engine::spec::{SpecChoice, SpecMethod, Speculative, Synthetic};
use crate::engine::{self, CacheConfig, DecodeMode, Generation, Request, SamplingParams};
use crate::model::{Decoder, Tokenizer};
use anyhow::{bail, Result};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the sweep runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SynthPlan {
    /// The prompt's token ids.
    pub prompt_ids: Vec<u32>,
    /// Tokens generated per run (EOS ignored).
    pub gen_len: usize,
    /// Acceptance rates to sweep: each the probability a draft is right when the drafts
    /// before it were, at every position.
    pub rates: Vec<f64>,
    /// Draft lengths to sweep.
    pub ks: Vec<usize>,
    /// Measured rounds; each runs plain once and every cell once.
    pub runs: usize,
    /// KV dtype and block size.
    pub cache: CacheConfig,
}

/// One (k, rate) cell's measurements over the rounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SynthCell {
    /// Draft tokens per verify step.
    pub k: usize,
    /// The set acceptance rate: a draft is right with this probability when the drafts
    /// before it were.
    pub rate: f64,
    /// Decode tokens/s per round.
    pub tokens_per_s: Vec<f64>,
    /// Speculative over plain decode tokens/s per round (the same round's plain run).
    pub speedup: Vec<f64>,
    /// Accepted over drafted tokens, measured (all rounds together).
    pub acceptance: f64,
    /// Tokens per verify step, measured.
    pub tokens_per_step: f64,
    /// Mean verify step time (forward pass) over the plain runs' mean TPOT.
    pub verify_cost: f64,
}

/// The sweep's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SynthReport {
    /// Plain decode tokens/s per round.
    pub plain_tokens_per_s: Vec<f64>,
    /// Plain runs' mean decode step (ms).
    pub plain_step_ms: f64,
    /// Every cell, k-major in the order given.
    pub cells: Vec<SynthCell>,
}

/// Mean of `v` (0 for none).
pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Run `plan`: a plain warm-up run gives the continuation, then `runs` rounds of plain, then
/// each cell. `progress` is called before each run with its label. None when `interrupt`
/// was set.
///
/// Errors: a run that stops before `gen_len` tokens, tensor failures.
pub fn run(
    decoder: &Decoder,
    tokenizer: &Tokenizer,
    plan: &SynthPlan,
    interrupt: &AtomicBool,
    mut progress: impl FnMut(&str),
) -> Result<Option<SynthReport>> {
    let vocab = decoder.config().vocab_size as u32;
    let request = |speculative| Request {
        prompt_ids: plan.prompt_ids.clone(),
        max_new_tokens: plan.gen_len,
        sampling: SamplingParams::greedy(),
        mode: DecodeMode::KvCache,
        cache: plan.cache,
        stop_token_ids: Vec::new(),
        stop_strings: Vec::new(),
        ignore_eos: true,
        speculative,
    };
    let go = |r: &Request| -> Result<Generation> {
        let gen = engine::generate(decoder, tokenizer, r, interrupt, |_| Ok(()))?;
        if gen.tokens.len() != plan.gen_len && !interrupt.load(Ordering::Relaxed) {
            bail!(
                "a run stopped after {} of {} tokens ({:?})",
                gen.tokens.len(),
                plan.gen_len,
                gen.finish_reason
            );
        }
        Ok(gen)
    };
    progress("warm-up (plain): the continuation the drafts copy");
    let reference = go(&request(SpecChoice::Off))?;
    let continuation = reference.tokens.clone();
    let mut cells: Vec<SynthCell> = Vec::new();
    let mut counts = Vec::new();
    for &k in &plan.ks {
        for &rate in &plan.rates {
            let synthetic = Synthetic::new(continuation.clone(), vec![rate], 0x5eed, vocab)?;
            let spec = Speculative {
                method: SpecMethod::Synthetic(Box::leak(Box::new(synthetic))),
                k,
                force: true,
            };
            cells.push(SynthCell {
                k,
                rate,
                tokens_per_s: Vec::new(),
                speedup: Vec::new(),
                acceptance: 0.0,
                tokens_per_step: 0.0,
                verify_cost: 0.0,
            });
            counts.push((spec, crate::engine::spec::SpecReport::default()));
        }
    }
    let mut plain = Vec::new();
    let mut plain_step = Vec::new();
    for round in 1..=plan.runs {
        progress(&format!("round {round}/{}: plain", plan.runs));
        let p = go(&request(SpecChoice::Off))?;
        if interrupt.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let base = p.stats.decode_tokens_per_s.unwrap_or(0.0);
        plain.push(base);
        plain_step.push(p.stats.tpot_ms.unwrap_or(0.0));
        for (cell, (spec, acc)) in cells.iter_mut().zip(&mut counts) {
            progress(&format!(
                "round {round}/{}: k {} at rate {}",
                plan.runs, cell.k, cell.rate
            ));
            let g = go(&request(SpecChoice::On(*spec)))?;
            if interrupt.load(Ordering::Relaxed) {
                return Ok(None);
            }
            if g.tokens != continuation {
                bail!("speculative run (k {}, rate {}) generated other tokens than plain decoding: a bug", cell.k, cell.rate);
            }
            let tps = g.stats.decode_tokens_per_s.unwrap_or(0.0);
            cell.tokens_per_s.push(tps);
            cell.speedup.push(if base > 0.0 { tps / base } else { 0.0 });
            if let Some(r) = &g.stats.spec {
                acc.counts.add(&r.counts);
                let n = acc.verify_steps as f64;
                let m = r.verify_steps as f64;
                if n + m > 0.0 {
                    acc.verify_step_ms = (acc.verify_step_ms * n + r.verify_step_ms * m) / (n + m);
                }
                acc.verify_steps += r.verify_steps;
            }
        }
    }
    let plain_step_ms = mean(&plain_step);
    for (cell, (_, acc)) in cells.iter_mut().zip(&counts) {
        cell.acceptance = acc.counts.acceptance_rate().unwrap_or(0.0);
        cell.tokens_per_step = acc.counts.mean_accepted_length().unwrap_or(1.0);
        cell.verify_cost = if plain_step_ms > 0.0 {
            acc.verify_step_ms / plain_step_ms
        } else {
            0.0
        };
    }
    Ok(Some(SynthReport {
        plain_tokens_per_s: plain,
        plain_step_ms,
        cells,
    }))
}

/// The report as a Markdown table: per cell, tokens/s (mean), speedup (mean, min–max over
/// rounds), measured acceptance, tokens per verify step and verify cost.
pub fn table(report: &SynthReport) -> String {
    let mut out = format!(
        "plain decode: {:.1} tokens/s (mean of {} rounds: {}), {:.2} ms per step\n\n",
        mean(&report.plain_tokens_per_s),
        report.plain_tokens_per_s.len(),
        report
            .plain_tokens_per_s
            .iter()
            .map(|v| format!("{v:.1}"))
            .collect::<Vec<_>>()
            .join(", "),
        report.plain_step_ms
    );
    out.push_str("| k | rate | tokens/s | speedup (min–max) | accepted | tokens/step | verify step / plain TPOT |\n|---:|---:|---:|---|---:|---:|---:|\n");
    for c in &report.cells {
        let lo = c.speedup.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = c.speedup.iter().copied().fold(0.0, f64::max);
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.2}× ({lo:.2}–{hi:.2}) | {:.1}% | {:.2} | {:.2}× |\n",
            c.k,
            c.rate,
            mean(&c.tokens_per_s),
            mean(&c.speedup),
            100.0 * c.acceptance,
            c.tokens_per_step,
            c.verify_cost
        ));
    }
    out
}
