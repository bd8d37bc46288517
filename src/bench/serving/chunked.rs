//! `nanollm bench --scenario chunked-prefill`: a long prompt arrives while other requests
//! decode. With chunked prefill (`--max-num-batched-tokens`) the running requests keep
//! getting a token between chunks; prefilled in one step, they stall for the whole prefill.
//! The long prompt arrives once every other request is decoding; reported, both ways: the
//! decoding requests' inter-token latency while the long prompt is prefilled (from its
//! arrival to its first token), and the long prompt's TTFT.
use crate::bench::serving::{serve, BenchRequest, ServeOutcome};
use crate::bench::text::PromptText;
use crate::engine::llm_engine::EngineConfig;
use crate::engine::stats::Percentiles;
use crate::model::{Decoder, Tokenizer};
use anyhow::{bail, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use serde::Serialize;
use std::sync::atomic::AtomicBool;

/// The scenario's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ChunkedPlan {
    /// Requests decoding when the long prompt arrives.
    pub decoders: usize,
    /// Their prompt tokens.
    pub prompt_len: usize,
    /// Their generated tokens.
    pub gen_len: usize,
    /// The long prompt's tokens.
    pub long_prompt_len: usize,
}

impl ChunkedPlan {
    /// Errors, one line naming the flag and its value: `--requests` 0, `--prompt-len` 0,
    /// `--gen-len` below 2 (an inter-token latency needs two tokens), `--long-prompt-len` 0.
    pub fn validate(&self) -> Result<()> {
        for (flag, value, least) in [
            ("--requests", self.decoders, 1),
            ("--prompt-len", self.prompt_len, 1),
            ("--gen-len", self.gen_len, 2),
            ("--long-prompt-len", self.long_prompt_len, 1),
        ] {
            if value < least {
                bail!("--scenario chunked-prefill: {flag} {value}: must be at least {least}");
            }
        }
        Ok(())
    }
}

/// One setting's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkedRun {
    /// The per-step token budget.
    pub max_num_batched_tokens: usize,
    /// The decoding requests' inter-token latencies (ms) while the long prompt was
    /// prefilled (gaps whose middle falls between its arrival and its first token).
    pub decoder_itl: Percentiles,
    /// Gaps counted in `decoder_itl`.
    pub decoder_gaps: usize,
    /// Whether a decoding request finished before the long prompt's first token (then
    /// the prefill was not watched to its end: raise --gen-len).
    pub decoders_finished_early: bool,
    /// The long prompt's TTFT (ms).
    pub long_prompt_ttft_ms: f64,
    /// The engine run.
    pub run: ServeOutcome,
}

/// Both settings.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkedResult {
    /// Settings.
    pub plan: ChunkedPlan,
    /// With the configured budget (chunked).
    pub chunked: ChunkedRun,
    /// With a budget that holds the whole long prompt (one-shot prefill).
    pub one_shot: ChunkedRun,
    /// Whether every request generated the same tokens both ways.
    pub identical: bool,
}

impl ChunkedPlan {
    /// Errors, before anything runs: a `--max-num-batched-tokens` that holds the whole long
    /// prompt (nothing to chunk), or a long prompt that does not fit `--max-model-len`.
    pub fn check_engine(&self, config: &EngineConfig) -> Result<()> {
        let budget = config.scheduler.max_num_batched_tokens;
        if budget >= self.long_prompt_len {
            bail!("--max-num-batched-tokens {budget} holds the whole --long-prompt-len {}: nothing to chunk; give a smaller budget or a longer prompt", self.long_prompt_len);
        }
        if self.long_prompt_len + 4 > config.max_model_len {
            bail!(
                "--long-prompt-len {}: does not fit --max-model-len {} with the tokens it generates",
                self.long_prompt_len,
                config.max_model_len
            );
        }
        Ok(())
    }
}

/// Run the scenario with `config`'s budget and with a one-shot budget; None when
/// interrupted. Errors: 0 decoders or tokens, a budget or context that does not fit
/// ([`ChunkedPlan::check_engine`]), engine failures.
pub fn run(
    decoder: &Decoder,
    tokenizer: &Tokenizer,
    config: EngineConfig,
    text: &PromptText,
    plan: ChunkedPlan,
    interrupt: &AtomicBool,
    trace: Option<&crate::trace::Tracer>,
) -> Result<Option<ChunkedResult>> {
    plan.validate()?;
    plan.check_engine(&config)?;
    let budget = config.scheduler.max_num_batched_tokens;
    let mut requests: Vec<BenchRequest> = (0..plan.decoders)
        .map(|i| {
            Ok(BenchRequest {
                prompt_ids: text.window(i * 397, plan.prompt_len)?,
                max_tokens: plan.gen_len,
                arrival_s: 0.0,
                ignore_eos: true,
                after_decoding: false,
            })
        })
        .collect::<Result<_>>()?;
    requests.push(BenchRequest {
        prompt_ids: text.window(5000, plan.long_prompt_len)?,
        max_tokens: 4,
        arrival_s: 0.0,
        ignore_eos: true,
        after_decoding: true,
    });
    // The scenario needs every decoder and the long prompt running at once.
    if config.scheduler.max_num_seqs < plan.decoders + 1 {
        eprintln!(
            "warning: --max-num-seqs {} raised to {} for --scenario chunked-prefill (its {} decoders and the long prompt run at once)",
            config.scheduler.max_num_seqs,
            plan.decoders + 1,
            plan.decoders
        );
    }
    let one = |budget: usize| -> Result<Option<ChunkedRun>> {
        let mut c = config;
        c.scheduler.max_num_batched_tokens = budget;
        c.scheduler.max_num_seqs = c.scheduler.max_num_seqs.max(plan.decoders + 1);
        let sender = trace.map(|t| t.process(&format!("chunked-prefill, {budget} tokens/step")));
        let Some(run) = serve(decoder, tokenizer, c, &requests, interrupt, sender.as_ref())? else {
            return Ok(None);
        };
        // Every request's times count from the start (the decoders arrive at 0).
        let long = &run.finished[plan.decoders].generation;
        let from = run.arrived_s[plan.decoders] * 1e3;
        let to = from + long.stats.ttft_ms;
        let gaps: Vec<f64> = run.finished[..plan.decoders]
            .iter()
            .flat_map(|f| f.generation.steps.iter().skip(1))
            // A gap is the long prompt's if its middle falls between the prompt's arrival
            // and its first token: the decoders' step that starts at the first-token step
            // (its start stamped a few µs before `to`) is not (it was counted before).
            .filter(|s| (from..to).contains(&(s.elapsed_ms - s.latency_ms / 2.0)))
            .map(|s| s.latency_ms)
            .collect();
        let early = run.finished[..plan.decoders]
            .iter()
            .any(|f| f.generation.steps.last().is_none_or(|s| s.elapsed_ms < to));
        Ok(Some(ChunkedRun {
            max_num_batched_tokens: budget,
            decoder_itl: Percentiles::of(&gaps),
            decoder_gaps: gaps.len(),
            decoders_finished_early: early,
            long_prompt_ttft_ms: run.finished[plan.decoders].generation.stats.ttft_ms,
            run,
        }))
    };
    let Some(chunked) = one(budget)? else {
        return Ok(None);
    };
    let whole = plan.long_prompt_len + plan.decoders;
    let Some(one_shot) = one(whole.max(config.scheduler.max_num_batched_tokens))? else {
        return Ok(None);
    };
    let identical = chunked
        .run
        .finished
        .iter()
        .zip(&one_shot.run.finished)
        .all(|(a, b)| a.generation.tokens == b.generation.tokens);
    Ok(Some(ChunkedResult {
        plan,
        chunked,
        one_shot,
        identical,
    }))
}

/// The scenario's table.
pub fn render(r: &ChunkedResult) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "prefill",
        "--max-num-batched-tokens",
        "decoders' ITL during the prefill, ms p50 / p99 / max (gaps)",
        "long prompt TTFT ms",
    ]);
    for (name, run) in [("chunked", &r.chunked), ("one-shot", &r.one_shot)] {
        t.add_row(vec![
            name.to_string(),
            run.max_num_batched_tokens.to_string(),
            format!(
                "{:.1} / {:.1} / {:.1} ({})",
                run.decoder_itl.p50_ms,
                run.decoder_itl.p99_ms,
                run.decoder_itl.max_ms,
                run.decoder_gaps
            ),
            format!("{:.1}", run.long_prompt_ttft_ms),
        ]);
    }
    for i in 1..=3 {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    let early = if r.chunked.decoders_finished_early || r.one_shot.decoders_finished_early {
        "\nnote: a decoding request finished before the long prompt's first token: raise --gen-len to watch the whole prefill"
    } else {
        ""
    };
    format!(
        "chunked prefill: {} requests ({} + {} tokens) decoding when a {}-token prompt arrives\n{t}\nsame tokens chunked and one-shot: {}{early}\n",
        r.plan.decoders,
        r.plan.prompt_len,
        r.plan.gen_len,
        r.plan.long_prompt_len,
        if r.identical { "yes" } else { "NO" }
    )
}
