//! `bench --kv-quality`: what a KV configuration (a dtype, an eviction policy and budget, or
//! both) costs in quality for the memory it saves, against the full f16 cache on the same
//! text. Per configuration: the bytes a sequence holds, the mean KL divergence of its
//! next-token distributions from the full cache's and its perplexity on the continuation of
//! a shipped text, and its retrieval accuracy on the synthetic passkey set ([`passkey`]).
//!
//! Each text window is a prompt of `ctx` tokens (prefilled, then compressed by the policy)
//! and a continuation of `cont` tokens fed one at a time as generated rows (teacher-forced,
//! on the decode kernels, evicting every `every` tokens): the positions scored are the
//! continuation's from its second token on (the first is predicted by the prompt's last
//! row, before the prompt's end evicts), where a compressed cache shows.
pub mod passkey;
pub mod svg;

use crate::engine::evict::{chunk_end, forward_step};
use crate::engine::CacheConfig;
use crate::eval::perplexity::log_softmax;
use crate::kv::evict::{EvictConfig, EvictState};
use crate::kv::{KvCache, KvDtype};
use crate::model::{Decoder, Tokenizer};
use anyhow::Result;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};

/// One configuration scored.
#[derive(Debug, Clone, Serialize)]
pub struct KvChoice {
    /// How it reads in the table (`f16`, `q8_0 + snapkv:budget=50%`).
    pub label: String,
    /// The cache it runs with.
    #[serde(skip)]
    pub cache: CacheConfig,
}

impl KvChoice {
    /// A configuration of `dtype` with `evict` (a `--kv-evict` value) or none.
    ///
    /// Errors: a bad `--kv-evict` value.
    pub fn new(dtype: KvDtype, evict: Option<&str>, block_size: usize) -> Result<KvChoice> {
        let cache = CacheConfig {
            dtype,
            block_size,
            swa_full: false,
            evict: evict.map(EvictConfig::parse).transpose()?,
        };
        let label = match &cache.evict {
            Some(e) => format!("{} + {}", dtype.name(), e.label()),
            None => dtype.name().to_string(),
        };
        Ok(KvChoice { label, cache })
    }
}

/// The configurations: the KV dtypes alone, each policy at 25, 50 and 75% of the
/// prompt on f16, and q8_0 with SnapKV at 50%.
///
/// Errors: none in practice (the flags are ours); kept for the parser's.
pub fn default_choices(block_size: usize) -> Result<Vec<KvChoice>> {
    let mut out = Vec::new();
    for dtype in [KvDtype::F16, KvDtype::Q8_0, KvDtype::Q4_0R, KvDtype::Iq4NlR] {
        out.push(KvChoice::new(dtype, None, block_size)?);
    }
    for policy in ["streaming", "snapkv", "h2o", "tova", "knorm", "random"] {
        for share in [25, 50, 75] {
            let flag = format!("{policy}:budget={share}%");
            out.push(KvChoice::new(KvDtype::F16, Some(&flag), block_size)?);
        }
    }
    out.push(KvChoice::new(
        KvDtype::Q8_0,
        Some("snapkv:budget=50%"),
        block_size,
    )?);
    Ok(out)
}

/// What to score.
#[derive(Debug, Clone, Serialize)]
pub struct QualityPlan {
    /// The configurations; the first is the reference (the full f16 cache).
    pub choices: Vec<KvChoice>,
    /// Prompt tokens per text window.
    pub ctx: usize,
    /// Continuation tokens scored per window.
    pub cont: usize,
    /// Text windows (consecutive, from the text's start).
    pub windows: usize,
    /// The passkey cases.
    pub passkey: Vec<passkey::PasskeyCase>,
    /// Tokens of answer generated per passkey case.
    pub answer_tokens: usize,
}

/// One configuration's scores.
#[derive(Debug, Clone, Serialize)]
pub struct QualityRow {
    /// The configuration's label.
    pub label: String,
    /// Bytes of KV blocks one sequence holds at the end of a text window (prompt and
    /// continuation, after its last eviction), mean over the windows.
    pub bytes_held: u64,
    /// Mean KL divergence from the reference's distributions over the continuation (nats).
    pub kld_mean: f64,
    /// Perplexity of the continuation.
    pub ppl: f64,
    /// Passkey cases retrieved.
    pub passkey_hits: usize,
    /// Passkey cases per haystack length and depth: (filler sentences, depth, retrieved).
    pub passkey: Vec<(usize, f64, bool)>,
    /// Whether no other row holds at most as many bytes with a KLD as low and a retrieval
    /// as high, one of them strictly better (the Pareto front).
    pub pareto: bool,
}

/// One configuration's model run: a cache sized for `max_tokens` and its eviction.
struct Run<'a> {
    decoder: &'a Decoder,
    cache: KvCache,
    evict: Option<EvictState>,
    prompt_len: usize,
}

impl<'a> Run<'a> {
    fn new(
        decoder: &'a Decoder,
        choice: &KvChoice,
        prompt_len: usize,
        max_tokens: usize,
    ) -> Result<Self> {
        let c = decoder.config();
        let cache = KvCache::with_groups(
            c.kv_shape(choice.cache.dtype),
            c.kv_groups(false),
            choice.cache.block_size,
            max_tokens,
        )?;
        let evict = choice.cache.evict.map(|e| {
            EvictState::new(
                e,
                prompt_len,
                c.num_hidden_layers,
                c.num_attention_heads,
                c.num_key_value_heads,
            )
        });
        Ok(Run {
            decoder,
            cache,
            evict,
            prompt_len,
        })
    }

    /// Prefill `prompt` (in chunks that stop at eviction points); the last row's logits.
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        loop {
            let start = self.cache.len();
            let end = chunk_end(start, (start + 512).min(prompt.len()), self.evict.as_ref());
            let logits = forward_step(
                self.decoder,
                &prompt[start..end],
                self.prompt_len,
                &mut self.cache,
                self.evict.as_mut(),
            )?;
            if end == prompt.len() {
                return Ok(logits);
            }
        }
    }

    /// Feed one generated token; its logits.
    fn feed(&mut self, token: u32) -> Result<Vec<f32>> {
        forward_step(
            self.decoder,
            &[token],
            self.prompt_len,
            &mut self.cache,
            self.evict.as_mut(),
        )
    }
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// Score every configuration of `plan` on `text` (token ids, at least `windows · (ctx +
/// cont)` long); `progress` is told each configuration as it starts. None when `interrupt`
/// was set.
///
/// Errors: a forward-pass failure, a token the tokenizer cannot decode.
pub fn run(
    decoder: &Decoder,
    tokenizer: &Tokenizer,
    plan: &QualityPlan,
    text: &[u32],
    interrupt: &AtomicBool,
    mut progress: impl FnMut(&str),
) -> Result<Option<Vec<QualityRow>>> {
    let span = plan.ctx + plan.cont;
    let windows: Vec<&[u32]> = text.chunks_exact(span).take(plan.windows).collect();
    // The reference's log-probabilities at every scored position of every window.
    let mut reference: Vec<Vec<Vec<f32>>> = Vec::new();
    let mut rows = Vec::new();
    let prompts: Vec<Vec<u32>> = plan
        .passkey
        .iter()
        .map(|c| tokenizer.encode(&c.prompt))
        .collect::<Result<_>>()?;
    for (ci, choice) in plan.choices.iter().enumerate() {
        progress(&choice.label);
        let (mut kld, mut nll, mut scored, mut held) = (0f64, 0f64, 0usize, 0u64);
        for (wi, w) in windows.iter().enumerate() {
            if interrupt.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let mut run = Run::new(decoder, choice, plan.ctx, span)?;
            run.prefill(&w[..plan.ctx])?;
            let mut mine = Vec::with_capacity(plan.cont);
            // The first continuation token comes from the prompt's logits, computed before
            // the prompt's end evicts: scored from the second on.
            for i in 1..plan.cont {
                let logits = run.feed(w[plan.ctx + i - 1])?;
                let lp = log_softmax(&logits);
                nll -= lp[w[plan.ctx + i] as usize] as f64;
                scored += 1;
                mine.push(lp);
            }
            held += run.cache.bytes_held();
            if ci == 0 {
                reference.push(mine);
            } else {
                for (p, q) in reference[wi].iter().zip(&mine) {
                    kld += p
                        .iter()
                        .zip(q)
                        .map(|(&lp, &lq)| (lp as f64).exp() * (lp as f64 - lq as f64))
                        .sum::<f64>();
                }
            }
        }
        let mut cases = Vec::new();
        for (case, prompt) in plan.passkey.iter().zip(&prompts) {
            if interrupt.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let mut run = Run::new(
                decoder,
                choice,
                prompt.len(),
                prompt.len() + plan.answer_tokens,
            )?;
            let mut logits = run.prefill(prompt)?;
            let mut answer = Vec::new();
            for i in 0..plan.answer_tokens {
                let t = argmax(&logits);
                answer.push(t);
                if i + 1 < plan.answer_tokens {
                    logits = run.feed(t)?;
                }
            }
            let text = tokenizer.decode(&answer)?;
            cases.push((case.filler, case.depth, text.contains(&case.key)));
        }
        let n = windows.len().max(1) as u64;
        rows.push(QualityRow {
            label: choice.label.clone(),
            bytes_held: held / n,
            kld_mean: kld / scored.max(1) as f64,
            ppl: (nll / scored.max(1) as f64).exp(),
            passkey_hits: cases.iter().filter(|c| c.2).count(),
            passkey: cases,
            pareto: false,
        });
    }
    mark_pareto(&mut rows);
    Ok(Some(rows))
}

/// Mark the rows no other row dominates: at most its bytes, at most its KLD and at least its
/// retrieval, with one of them strictly better.
pub fn mark_pareto(rows: &mut [QualityRow]) {
    let snapshot: Vec<(u64, f64, usize)> = rows
        .iter()
        .map(|r| (r.bytes_held, r.kld_mean, r.passkey_hits))
        .collect();
    for (i, r) in rows.iter_mut().enumerate() {
        let (b, k, p) = snapshot[i];
        r.pareto = !snapshot.iter().enumerate().any(|(j, &(b2, k2, p2))| {
            j != i && b2 <= b && k2 <= k && p2 >= p && (b2 < b || k2 < k || p2 > p)
        });
    }
}

/// The table: one row per configuration, the front marked with `*`.
pub fn table(rows: &[QualityRow], cases: usize) -> String {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::NOTHING);
    t.set_header([
        "configuration",
        "KV held / seq",
        "mean KLD",
        "PPL",
        "passkey",
        "front",
    ]);
    for r in rows {
        t.add_row([
            r.label.clone(),
            crate::units::binary_size(r.bytes_held),
            format!("{:.5}", r.kld_mean),
            format!("{:.3}", r.ppl),
            format!("{}/{cases}", r.passkey_hits),
            if r.pareto { "*".into() } else { String::new() },
        ]);
    }
    format!("{t}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(bytes: u64, kld: f64, hits: usize) -> QualityRow {
        QualityRow {
            label: String::new(),
            bytes_held: bytes,
            kld_mean: kld,
            ppl: 1.0,
            passkey_hits: hits,
            passkey: Vec::new(),
            pareto: false,
        }
    }

    #[test]
    fn the_front_holds_the_rows_nothing_beats_on_every_axis() {
        let mut rows = vec![
            row(100, 0.0, 9),
            row(50, 0.1, 9),
            row(60, 0.2, 9),
            row(50, 0.1, 3),
            row(20, 0.5, 1),
        ];
        mark_pareto(&mut rows);
        let front: Vec<bool> = rows.iter().map(|r| r.pareto).collect();
        assert_eq!(front, vec![true, true, false, false, true]);
    }
}
