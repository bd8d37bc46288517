//! Serving benchmarks on the batched engine: many requests at once (`bench --concurrency`),
//! a shared prefix and a multi-turn chat (`bench --scenario`), and a long prompt arriving
//! while others decode (`--scenario chunked-prefill`).
//!
//! - [`serve`]: feed requests to one [`LlmEngine`] at their arrival times and step it until
//!   all have finished (the engine loop every scenario uses);
//! - [`concurrency`]: aggregate tokens/s, TTFT and TPOT per concurrency level;
//! - [`prefix`]: shared-prefix and chat scenarios, prefix cache on against off;
//! - [`chunked`]: the ITL of decoding requests while a long prompt is prefilled;
//! - [`svg`]: every step's latency and batch size, per run (`--plot`).
pub mod chat;
pub mod chunked;
pub mod concurrency;
pub mod prefix;
pub mod svg;

use crate::engine::llm_engine::{EngineConfig, Finished, LlmEngine, StepRecord};
use crate::engine::{CacheConfig, DecodeMode, Request, SamplingParams};
use crate::model::{Decoder, Tokenizer};
use crate::trace::TraceSender;
use anyhow::{bail, Result};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One benchmark request: token ids, exactly `max_tokens` generated (end-of-sequence
/// ignored, as vLLM's `--ignore-eos`), arriving `arrival_s` after the start.
#[derive(Debug, Clone)]
pub struct BenchRequest {
    /// Prompt token ids.
    pub prompt_ids: Vec<u32>,
    /// Tokens to generate.
    pub max_tokens: usize,
    /// Seconds after the start.
    pub arrival_s: f64,
    /// Keep generating past end-of-sequence tokens (benchmarks: exactly `max_tokens`).
    pub ignore_eos: bool,
    /// Arrive once every earlier request is decoding (has its first token), at
    /// `arrival_s` at the earliest.
    pub after_decoding: bool,
}

impl BenchRequest {
    /// The engine request: greedy, KV-cached.
    pub fn to_request(&self, cache: CacheConfig) -> Request {
        Request {
            prompt_ids: self.prompt_ids.clone(),
            max_new_tokens: self.max_tokens,
            sampling: SamplingParams::greedy(),
            mode: DecodeMode::KvCache,
            cache,
            stop_token_ids: Vec::new(),
            stop_strings: Vec::new(),
            ignore_eos: self.ignore_eos,
            speculative: Default::default(),
        }
    }
}

/// What one engine run did.
#[derive(Debug, Clone, Serialize)]
pub struct ServeOutcome {
    /// Each request's result, in request order.
    #[serde(skip)]
    pub finished: Vec<Finished>,
    /// Seconds from the start to the last token.
    pub duration_s: f64,
    /// Every engine step (batch size, tokens, ms, blocks in use).
    pub steps: Vec<StepRecord>,
    /// When each request was added, seconds after the start (request order).
    pub arrived_s: Vec<f64>,
    /// Most blocks in use at once.
    pub peak_kv_blocks: usize,
    /// Bytes of those blocks.
    pub peak_kv_bytes: u64,
    /// Prompt tokens looked up in / served by the prefix cache.
    pub prefix_cache_queries_tokens: u64,
    /// Prompt tokens served by the prefix cache's pool.
    pub prefix_cache_hits_tokens: u64,
    /// Prompt tokens read back from the disk tier (`--kv-offload-dir`).
    pub prefix_cache_disk_hits_tokens: u64,
    /// The disk tier's counters at the end of the run (None without `--kv-offload-dir`).
    pub kv_offload: Option<crate::kv::offload::OffloadStats>,
    /// Preemptions.
    pub preemptions: u64,
    /// Blocks still in use after every request finished (0 unless the engine leaks).
    pub blocks_leaked: usize,
}

/// Run `requests` through a new engine of `config`: each is added at its arrival time, the
/// engine steps until all have finished. Returns None when `interrupt` was set. With
/// `trace`, the engine records its events and sends them after every step (`--trace`).
///
/// Errors: engine construction, a request the engine refuses, a forward-pass failure.
pub fn serve(
    decoder: &Decoder,
    tokenizer: &Tokenizer,
    config: EngineConfig,
    requests: &[BenchRequest],
    interrupt: &AtomicBool,
    trace: Option<&TraceSender>,
) -> Result<Option<ServeOutcome>> {
    let mut engine = LlmEngine::new(decoder, tokenizer, config)?;
    engine.record_trace(trace.is_some());
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by(|&a, &b| requests[a].arrival_s.total_cmp(&requests[b].arrival_s));
    let mut next = 0;
    let mut index_of = vec![usize::MAX; requests.len()];
    let mut finished: Vec<Option<Finished>> = vec![None; requests.len()];
    let mut done = 0;
    let mut arrived_s = vec![0.0; requests.len()];
    let t0 = Instant::now();
    while done < requests.len() {
        if interrupt.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let now = t0.elapsed().as_secs_f64();
        while next < order.len()
            && requests[order[next]].arrival_s <= now
            && (!requests[order[next]].after_decoding || engine.all_decoding())
        {
            let i = order[next];
            arrived_s[i] = now;
            let id = engine.add_request(requests[i].to_request(config.cache))?;
            if id >= index_of.len() {
                index_of.resize(id + 1, usize::MAX);
            }
            index_of[id] = i;
            next += 1;
        }
        if engine.num_unfinished() == 0 {
            if next < order.len() {
                let wait = requests[order[next]].arrival_s - t0.elapsed().as_secs_f64();
                std::thread::sleep(Duration::from_secs_f64(wait.clamp(0.0, 0.05)));
            }
            continue;
        }
        let step = engine.step(false)?;
        if let Some(t) = trace {
            t.send(engine.take_trace());
        }
        for f in step.finished {
            let i = index_of[f.seq_id];
            finished[i] = Some(f);
            done += 1;
        }
    }
    let duration_s = t0.elapsed().as_secs_f64();
    let (queries, hits) = engine.prefix_cache_counters();
    let block_bytes = engine.pool().block_bytes() as u64;
    let finished: Vec<Finished> = finished.into_iter().flatten().collect();
    if finished.len() != requests.len() {
        bail!("the engine lost a request");
    }
    Ok(Some(ServeOutcome {
        finished,
        duration_s,
        steps: engine.steps.clone(),
        arrived_s,
        peak_kv_blocks: engine.peak_blocks_used,
        peak_kv_bytes: engine.peak_blocks_used as u64 * block_bytes,
        prefix_cache_queries_tokens: queries,
        prefix_cache_hits_tokens: hits,
        prefix_cache_disk_hits_tokens: engine.prefix_disk_hits(),
        kv_offload: {
            // Every block of this run on disk before the next run's engine opens the tier.
            engine.flush_offload();
            engine.offload_stats()
        },
        preemptions: engine.preemptions(),
        blocks_leaked: engine.pool().num_used_blocks(),
    }))
}

/// Arrival times of `n` requests: all at 0 when `rate` is None (or infinite), else a Poisson
/// process of `rate` requests per second (exponential gaps, vLLM's `--request-rate`), from
/// a fixed seed so runs compare.
pub fn arrivals(n: usize, rate: Option<f64>, seed: u64) -> Vec<f64> {
    let Some(rate) = rate.filter(|r| r.is_finite() && *r > 0.0) else {
        return vec![0.0; n];
    };
    let mut state = seed.max(1);
    let mut t = 0.0;
    (0..n)
        .map(|i| {
            if i > 0 {
                // xorshift64*, uniform in (0, 1].
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                let u = ((state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 1.0)
                    / (1u64 << 53) as f64;
                t += -u.ln() / rate;
            }
            t
        })
        .collect()
}

/// Decode-phase aggregate tokens/s: over the steps that only decoded, sequences stepped /
/// seconds (running sequences × one token per step / step time). None without such steps.
pub fn decode_tokens_per_s(steps: &[StepRecord]) -> Option<f64> {
    let (tokens, ms) = steps
        .iter()
        .filter(|s| s.prefill_tokens == 0 && s.decode_seqs > 0)
        .fold((0usize, 0f64), |(t, m), s| (t + s.decode_seqs, m + s.ms));
    (ms > 0.0).then(|| tokens as f64 / (ms / 1e3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_arrivals_have_the_asked_rate() {
        assert_eq!(arrivals(3, None, 1), vec![0.0; 3]);
        let a = arrivals(20_000, Some(4.0), 7);
        assert_eq!(a[0], 0.0);
        assert!(a.windows(2).all(|w| w[1] >= w[0]));
        let rate = (a.len() - 1) as f64 / a[a.len() - 1];
        assert!((rate - 4.0).abs() < 0.15, "rate {rate}");
    }

    #[test]
    fn decode_rate_counts_pure_decode_steps_only() {
        let step = |decode_seqs, prefill_tokens, ms| StepRecord {
            batch_size: decode_seqs + usize::from(prefill_tokens > 0),
            decode_seqs,
            tokens: decode_seqs + prefill_tokens,
            prefill_tokens,
            ms,
            blocks_used: 0,
            ..Default::default()
        };
        let steps = [
            step(0, 128, 300.0),
            step(4, 0, 10.0),
            step(4, 64, 200.0),
            step(2, 0, 10.0),
        ];
        assert_eq!(decode_tokens_per_s(&steps), Some(6.0 / 0.02));
        assert_eq!(decode_tokens_per_s(&steps[..1]), None);
    }
}
