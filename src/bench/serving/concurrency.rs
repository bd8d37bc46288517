//! `nanollm bench --concurrency 1,2,4,8`: the same requests at several concurrency levels
//! through the batched engine, to show that decode is memory-bound (batching is nearly
//! free until compute takes over) while KV memory grows with the batch.
//!
//! Per level (vLLM's benchmark definitions): decode-phase aggregate tokens/s (sequences
//! stepped per second over the steps that only decode), overall output tokens/s (every
//! generated token over the whole run, prefill included), request TTFT and TPOT (mean, p50,
//! p99), peak KV blocks and bytes, and whether every request produced the same tokens as
//! at the first level.
use crate::bench::serving::{arrivals, decode_tokens_per_s, serve, BenchRequest, ServeOutcome};
use crate::bench::text::PromptText;
use crate::engine::llm_engine::EngineConfig;
use crate::engine::stats::Percentiles;
use crate::model::decoder::ffn::moe::ExpertCounts;
use crate::model::{Decoder, Tokenizer};
use anyhow::{bail, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use serde::Serialize;
use std::sync::atomic::AtomicBool;

/// What `--concurrency` runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConcurrencyPlan {
    /// Concurrency levels (`--concurrency`): the most requests in flight (the engine's
    /// `--max-num-seqs` for that level).
    pub levels: Vec<usize>,
    /// Requests per level (`--num-prompts`), the same prompts at every level.
    pub num_prompts: usize,
    /// Prompt tokens per request.
    pub prompt_len: usize,
    /// Generated tokens per request (end-of-sequence ignored).
    pub gen_len: usize,
    /// Poisson arrival rate in requests/s (`--request-rate`); None: all at once.
    pub request_rate: Option<f64>,
}

impl ConcurrencyPlan {
    /// Errors: no level, a level of 0 or listed twice, no prompt, 0 prompt or generated
    /// tokens.
    pub fn validate(&self) -> Result<()> {
        if self.levels.is_empty() {
            bail!("--concurrency: give at least one level");
        }
        if self.levels.contains(&0) {
            bail!("--concurrency 0: every level must be at least 1");
        }
        for (i, c) in self.levels.iter().enumerate() {
            if self.levels[..i].contains(c) {
                bail!("--concurrency: {c} is listed twice");
            }
        }
        if self.num_prompts == 0 {
            bail!("--num-prompts 0: must be at least 1");
        }
        if self.prompt_len == 0 {
            bail!("--prompt-len 0: must be at least 1 token");
        }
        if self.gen_len == 0 {
            bail!("--gen-len 0: must be at least 1 token");
        }
        if let Some(r) = self.request_rate {
            if r.is_nan() || r <= 0.0 {
                bail!("--request-rate {r}: must be > 0 requests/s (inf: all at once)");
            }
        }
        Ok(())
    }

    /// Errors when a request (`--prompt-len` + `--gen-len`, every one generating all its
    /// tokens) does not fit `max_model_len` (`--max-model-len`): refused up front rather
    /// than cut short at the context with the header still saying `--gen-len`.
    pub fn check_fits(&self, max_model_len: usize) -> Result<()> {
        let needed = self.prompt_len.saturating_add(self.gen_len);
        if needed > max_model_len {
            bail!(
                "--prompt-len {} + --gen-len {}: {needed} tokens do not fit --max-model-len {max_model_len}",
                self.prompt_len,
                self.gen_len
            );
        }
        Ok(())
    }

    /// The requests: prompt i is `prompt_len` tokens of the text from offset `i · 397`
    /// (distinct prompts, no shared prefix beyond chance).
    pub fn requests(&self, text: &PromptText) -> Result<Vec<BenchRequest>> {
        let times = arrivals(self.num_prompts, self.request_rate, 0x5eed);
        (0..self.num_prompts)
            .map(|i| {
                Ok(BenchRequest {
                    prompt_ids: text.window(i * 397, self.prompt_len)?,
                    max_tokens: self.gen_len,
                    arrival_s: times[i],
                    ignore_eos: true,
                    after_decoding: false,
                })
            })
            .collect()
    }
}

/// One concurrency level's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LevelResult {
    /// The level.
    pub concurrency: usize,
    /// Requests run.
    pub requests: usize,
    /// Generated tokens, all requests.
    pub output_tokens: usize,
    /// Output tokens / duration (vLLM's "output token throughput", prefill included).
    pub output_tokens_per_s: f64,
    /// Decode-phase aggregate tokens/s (see [`decode_tokens_per_s`]).
    pub decode_tokens_per_s: Option<f64>,
    /// Request TTFT (ms).
    pub ttft: Percentiles,
    /// Request TPOT (ms); None (JSON null) when no request generated two tokens.
    pub tpot: Option<Percentiles>,
    /// Mean sequences per step.
    pub mean_batch_size: f64,
    /// A mixture of experts: the distinct experts a step reads per layer, the mean over
    /// steps and layers (k for one sequence, up to all of them as the batch grows: the
    /// expert weights a step streams); None for a dense model.
    pub experts_touched_per_step: Option<f64>,
    /// Whether every request generated the same tokens as at the first level.
    pub identical_to_first_level: bool,
    /// Requests whose tokens differ from the first level's.
    pub differing_requests: Vec<usize>,
    /// The engine run: duration, every step, peak KV, prefix cache, preemptions, leaks.
    pub run: ServeOutcome,
}

/// Run every level of `plan` with `base` (its `max_num_seqs` set per level); None when
/// interrupted.
pub fn run_levels(
    decoder: &Decoder,
    tokenizer: &Tokenizer,
    base: EngineConfig,
    text: &PromptText,
    plan: &ConcurrencyPlan,
    interrupt: &AtomicBool,
    trace: Option<&crate::trace::Tracer>,
) -> Result<Option<Vec<LevelResult>>> {
    let requests = plan.requests(text)?;
    let mut out: Vec<LevelResult> = Vec::new();
    let mut first: Option<Vec<Vec<u32>>> = None;
    for &c in &plan.levels {
        let mut config = base;
        config.scheduler.max_num_seqs = c;
        let sender = trace.map(|t| t.process(&format!("concurrency {c}")));
        let experts_before = decoder.expert_counts();
        let Some(run) = serve(
            decoder,
            tokenizer,
            config,
            &requests,
            interrupt,
            sender.as_ref(),
        )?
        else {
            return Ok(None);
        };
        let tokens: Vec<Vec<u32>> = run
            .finished
            .iter()
            .map(|f| f.generation.tokens.clone())
            .collect();
        let reference = first.get_or_insert_with(|| tokens.clone());
        let differing: Vec<usize> = (0..tokens.len())
            .filter(|&i| tokens[i] != reference[i])
            .collect();
        let stats: Vec<_> = run.finished.iter().map(|f| &f.generation.stats).collect();
        let output_tokens = stats.iter().map(|s| s.generated_tokens).sum();
        let ttft: Vec<f64> = stats.iter().map(|s| s.ttft_ms).collect();
        let tpot: Vec<f64> = stats.iter().filter_map(|s| s.tpot_ms).collect();
        let steps = &run.steps;
        let experts_touched_per_step = match (experts_before, decoder.expert_counts()) {
            (Some(before), Some(after)) => touched_per_pass(&before, &after),
            _ => None,
        };
        out.push(LevelResult {
            concurrency: c,
            requests: requests.len(),
            output_tokens,
            output_tokens_per_s: output_tokens as f64 / run.duration_s.max(1e-9),
            decode_tokens_per_s: decode_tokens_per_s(steps),
            ttft: Percentiles::of(&ttft),
            tpot: (!tpot.is_empty()).then(|| Percentiles::of(&tpot)),
            mean_batch_size: steps.iter().map(|s| s.batch_size).sum::<usize>() as f64
                / steps.len().max(1) as f64,
            experts_touched_per_step,
            identical_to_first_level: differing.is_empty(),
            differing_requests: differing,
            run,
        });
    }
    Ok(Some(out))
}

/// Mean over layers of the distinct experts per pass between two snapshots of every MoE
/// layer's counters; None when no pass ran.
fn touched_per_pass(before: &[ExpertCounts], after: &[ExpertCounts]) -> Option<f64> {
    let per_layer: Vec<f64> = after
        .iter()
        .zip(before)
        .map(|(a, b)| a.since(b))
        .filter(|d| d.passes > 0)
        .map(|d| d.touched as f64 / d.passes as f64)
        .collect();
    (!per_layer.is_empty()).then(|| per_layer.iter().sum::<f64>() / per_layer.len() as f64)
}

/// The concurrency table.
pub fn render(levels: &[LevelResult]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "concurrency",
        "decode tok/s (aggregate)",
        "× first level",
        "output tok/s",
        "TTFT ms mean / p50 / p99",
        "TPOT ms mean / p50 / p99",
        "mean batch",
        "experts / step",
        "peak KV",
        "same tokens",
    ]);
    let base = levels.first().and_then(|l| l.decode_tokens_per_s);
    for l in levels {
        let d = l.decode_tokens_per_s;
        t.add_row(vec![
            l.concurrency.to_string(),
            d.map_or("-".into(), rate),
            match (d, base) {
                (Some(d), Some(b)) if b > 0.0 => format!("{:.2}×", d / b),
                _ => "-".into(),
            },
            rate(l.output_tokens_per_s),
            format!(
                "{:.1} / {:.1} / {:.1}",
                l.ttft.mean_ms, l.ttft.p50_ms, l.ttft.p99_ms
            ),
            match &l.tpot {
                Some(t) => format!("{:.2} / {:.2} / {:.2}", t.mean_ms, t.p50_ms, t.p99_ms),
                None => "- (one token each)".into(),
            },
            format!("{:.2}", l.mean_batch_size),
            l.experts_touched_per_step
                .map_or("-".into(), |e| format!("{e:.1}")),
            format!(
                "{} blocks, {:.2} MiB",
                l.run.peak_kv_blocks,
                l.run.peak_kv_bytes as f64 / (1u64 << 20) as f64
            ),
            if l.identical_to_first_level {
                "yes"
            } else {
                "NO"
            }
            .into(),
        ]);
    }
    for i in 1..=9 {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    format!("{t}\n")
}

/// A tokens/s figure for the table: one decimal, or three below 1 (an 8k-token prompt and 4
/// tokens read 0.047, not 0.0).
fn rate(v: f64) -> String {
    match v.abs() >= 1.0 || v == 0.0 {
        true => format!("{v:.1}"),
        false => format!("{v:.3}"),
    }
}
