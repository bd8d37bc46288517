//! Prefix-caching scenarios (`nanollm bench --scenario shared-prefix|chat`): requests that
//! share a prefix run one after another through one engine, with the prefix cache on and
//! then off, so the warm requests' TTFT shows what the cache saves.
//!
//! - shared-prefix: a prefix of `--prefix-len` token ids (a system prompt, tool definitions)
//!   followed by `--suffix-len` distinct ids per request; built from ids, not text, so BPE
//!   merges at the seam cannot change the prefix. One cold request, then the warm ones. With
//!   blocks of 16 tokens, a 1,024 + 64-token prompt is 68 blocks, 64 of them shared: a warm
//!   hit rate of 64 / 68 = 94.1%.
//! - chat ([`super::chat`]): a multi-turn conversation re-sending its history each turn.
use crate::bench::serving::BenchRequest;
use crate::bench::text::PromptText;
use crate::engine::llm_engine::{EngineConfig, Finished, LlmEngine};
use crate::engine::stats::Percentiles;
use crate::model::Loaded;
use crate::trace::{TraceSender, Tracer};
use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};

/// One request of a sequential scenario, as the engine ran it.
#[derive(Debug, Clone, Serialize)]
pub struct TurnResult {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Of them, served by the prefix cache.
    pub cached_tokens: usize,
    /// Time to first token (ms).
    pub ttft_ms: f64,
    /// Generated tokens.
    pub generated_tokens: usize,
    /// Generated token ids (the on/off comparison).
    #[serde(skip)]
    pub tokens: Vec<u32>,
}

impl TurnResult {
    pub(super) fn of(f: &Finished) -> TurnResult {
        let s = &f.generation.stats;
        TurnResult {
            prompt_tokens: s.prompt_tokens,
            cached_tokens: f.cached_prompt_tokens,
            ttft_ms: s.ttft_ms,
            generated_tokens: s.generated_tokens,
            tokens: f.generation.tokens.clone(),
        }
    }
}

/// Run requests one after another through one engine: `next` gives request i from the
/// previous one's result (None: done). None when interrupted.
pub(super) fn run_sequential(
    model: &Loaded,
    config: EngineConfig,
    what: &str,
    interrupt: &AtomicBool,
    trace: Option<&TraceSender>,
    mut next: impl FnMut(usize, Option<&Finished>) -> Result<Option<BenchRequest>>,
) -> Result<Option<(Vec<Finished>, usize)>> {
    let mut engine = LlmEngine::new(&model.decoder, &model.tokenizer, config)?;
    engine.record_trace(trace.is_some());
    let mut out: Vec<Finished> = Vec::new();
    while let Some(req) = next(out.len(), out.last())? {
        engine
            .add_request(req.to_request(config.cache))
            .with_context(|| format!("{what} {}", out.len() + 1))?;
        loop {
            if interrupt.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let step = engine.step(false)?;
            if let Some(t) = trace {
                t.send(engine.take_trace());
            }
            if let Some(f) = step.finished.into_iter().next() {
                out.push(f);
                break;
            }
        }
    }
    Ok(Some((out, engine.pool().num_used_blocks())))
}

/// The shared-prefix scenario's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SharedPrefixPlan {
    /// Shared prefix tokens.
    pub prefix_len: usize,
    /// Distinct tokens per request after the prefix.
    pub suffix_len: usize,
    /// Requests (the first is cold).
    pub requests: usize,
    /// Tokens generated per request.
    pub gen_len: usize,
}

impl SharedPrefixPlan {
    /// Errors when a request's prompt (`--prefix-len` + `--suffix-len`) and its `--gen-len`
    /// tokens do not fit `max_model_len` (`--max-model-len`), naming the three flags.
    pub fn check_fits(&self, max_model_len: usize) -> Result<()> {
        let prompt = self.prefix_len.saturating_add(self.suffix_len);
        let needed = prompt.saturating_add(self.gen_len);
        if needed > max_model_len {
            bail!(
                "--prefix-len {} + --suffix-len {} + --gen-len {}: {needed} tokens do not fit --max-model-len {max_model_len} (every request generates --gen-len tokens after its prompt)",
                self.prefix_len,
                self.suffix_len,
                self.gen_len
            );
        }
        Ok(())
    }

    /// Errors, one line naming the flag: a length of 0, a prefix shorter than one KV block
    /// of `block_size` tokens (nothing could be shared), fewer than 2 requests.
    pub fn validate(&self, block_size: usize) -> Result<()> {
        for (flag, n) in [
            ("--prefix-len", self.prefix_len),
            ("--suffix-len", self.suffix_len),
            ("--gen-len", self.gen_len),
        ] {
            if n == 0 {
                bail!("{flag} 0: must be at least 1 token");
            }
        }
        if self.prefix_len < block_size {
            bail!(
                "--prefix-len {}: shorter than one KV block ({block_size} tokens), so nothing can be shared; give at least {block_size}",
                self.prefix_len
            );
        }
        if self.requests < 2 {
            bail!(
                "--requests {}: needs at least 2 (one cold, then warm ones)",
                self.requests
            );
        }
        Ok(())
    }
}

/// Results of the shared-prefix scenario, cache on and off.
#[derive(Debug, Clone, Serialize)]
pub struct SharedPrefixResult {
    /// Settings.
    pub plan: SharedPrefixPlan,
    /// Per request, prefix cache on.
    pub on: Vec<TurnResult>,
    /// Per request, prefix cache off.
    pub off: Vec<TurnResult>,
    /// TTFT of the warm requests (all but the first), cache on (ms).
    pub warm_ttft_on: Percentiles,
    /// TTFT of the warm requests, cache off (ms).
    pub warm_ttft_off: Percentiles,
    /// warm_ttft_off.mean / warm_ttft_on.mean.
    pub warm_ttft_speedup: f64,
    /// Warm requests' prompt tokens served by the cache / their prompt tokens (%).
    pub warm_hit_rate_pct: f64,
    /// The hit rate the block arithmetic predicts: full prefix blocks / prompt blocks (%).
    pub expected_hit_rate_pct: f64,
    /// Prompt tokens computed / reused with the cache on, all requests.
    pub prompt_tokens_computed: usize,
    /// Prompt tokens reused from the cache, all requests.
    pub prompt_tokens_reused: usize,
    /// Whether every request generated the same tokens with the cache on and off.
    pub identical: bool,
    /// Blocks in use after the last request (cache on, then off).
    pub blocks_leaked: [usize; 2],
}

/// Run the shared-prefix scenario; None when interrupted.
///
/// Errors: a plan with 0 tokens or fewer than 2 requests, engine failures.
pub fn shared_prefix(
    model: &Loaded,
    config: EngineConfig,
    text: &PromptText,
    plan: SharedPrefixPlan,
    interrupt: &AtomicBool,
    trace: Option<&Tracer>,
) -> Result<Option<SharedPrefixResult>> {
    plan.validate(config.cache.block_size)?;
    let prefix = text.window(0, plan.prefix_len)?;
    let prompts: Vec<Vec<u32>> = (0..plan.requests)
        .map(|i| {
            let mut p = prefix.clone();
            p.extend(text.window(
                plan.prefix_len + 7 + i * (plan.suffix_len + 13),
                plan.suffix_len,
            )?);
            Ok(p)
        })
        .collect::<Result<_>>()?;
    let run = |enable: bool| {
        let mut c = config;
        c.scheduler.enable_prefix_caching = enable;
        // The disk tier is a tier of the prefix cache: off with it.
        if !enable {
            c.offload = None;
        }
        let name = format!(
            "shared-prefix, prefix cache {}",
            if enable { "on" } else { "off" }
        );
        let sender = trace.map(|t| t.process(&name));
        run_sequential(model, c, "request", interrupt, sender.as_ref(), |i, _| {
            Ok(prompts.get(i).map(|p| BenchRequest {
                prompt_ids: p.clone(),
                max_tokens: plan.gen_len,
                arrival_s: 0.0,
                ignore_eos: true,
                after_decoding: false,
            }))
        })
    };
    let Some((on, leaked_on)) = run(true)? else {
        return Ok(None);
    };
    let Some((off, leaked_off)) = run(false)? else {
        return Ok(None);
    };
    let on: Vec<TurnResult> = on.iter().map(TurnResult::of).collect();
    let off: Vec<TurnResult> = off.iter().map(TurnResult::of).collect();
    let warm =
        |v: &[TurnResult]| Percentiles::of(&v[1..].iter().map(|t| t.ttft_ms).collect::<Vec<_>>());
    let (warm_on, warm_off) = (warm(&on), warm(&off));
    let warm_prompt: usize = on[1..].iter().map(|t| t.prompt_tokens).sum();
    let warm_cached: usize = on[1..].iter().map(|t| t.cached_tokens).sum();
    let bs = config.cache.block_size;
    let total = plan.prefix_len + plan.suffix_len;
    let shared_blocks = plan.prefix_len.min(total - 1) / bs;
    Ok(Some(SharedPrefixResult {
        plan,
        warm_ttft_speedup: warm_off.mean_ms / warm_on.mean_ms.max(1e-9),
        warm_hit_rate_pct: 100.0 * warm_cached as f64 / warm_prompt.max(1) as f64,
        // On the measured figure's basis: the shared blocks' tokens over the prompt's
        // tokens (1k + 64 in blocks of 16: 1,024 / 1,088 = 64 of 68 blocks = 94.1%).
        expected_hit_rate_pct: 100.0 * (shared_blocks * bs) as f64 / total as f64,
        prompt_tokens_computed: on.iter().map(|t| t.prompt_tokens - t.cached_tokens).sum(),
        prompt_tokens_reused: on.iter().map(|t| t.cached_tokens).sum(),
        identical: on.iter().zip(&off).all(|(a, b)| a.tokens == b.tokens),
        blocks_leaked: [leaked_on, leaked_off],
        warm_ttft_on: warm_on,
        warm_ttft_off: warm_off,
        on,
        off,
    }))
}

/// The shared-prefix table.
pub fn render_shared_prefix(r: &SharedPrefixResult) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "prefix cache",
        "cold TTFT ms",
        "warm TTFT ms mean / p50 / p99",
        "warm hit rate",
        "prompt tokens computed / reused",
    ]);
    for (name, runs, warm) in [
        ("on", &r.on, &r.warm_ttft_on),
        ("off", &r.off, &r.warm_ttft_off),
    ] {
        let computed: usize = runs.iter().map(|t| t.prompt_tokens - t.cached_tokens).sum();
        let reused: usize = runs.iter().map(|t| t.cached_tokens).sum();
        let prompt: usize = runs[1..].iter().map(|t| t.prompt_tokens).sum();
        let cached: usize = runs[1..].iter().map(|t| t.cached_tokens).sum();
        t.add_row(vec![
            name.to_string(),
            format!("{:.1}", runs[0].ttft_ms),
            format!(
                "{:.1} / {:.1} / {:.1}",
                warm.mean_ms, warm.p50_ms, warm.p99_ms
            ),
            format!("{:.1}%", 100.0 * cached as f64 / prompt.max(1) as f64),
            format!("{computed} / {reused}"),
        ]);
    }
    for i in 1..=4 {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    format!(
        "shared prefix: {} + {} tokens, {} requests one after another, {} generated each\n{t}\nwarm TTFT {:.1}× lower with the prefix cache; warm hit rate {:.1}% (block arithmetic: {:.1}%); same tokens on and off: {}\n",
        r.plan.prefix_len,
        r.plan.suffix_len,
        r.plan.requests,
        r.plan.gen_len,
        r.warm_ttft_speedup,
        r.warm_hit_rate_pct,
        r.expected_hit_rate_pct,
        if r.identical { "yes" } else { "NO" }
    )
}
