//! Latency statistics of one generation (definitions follow vLLM's benchmark_serving):
//!
//! - TTFT (time to first token): from the start of the request, after tokenization, to the
//!   first sampled token; covers prefill and the first sampling.
//! - TPOT (time per output token): (E2EL − TTFT) / (generated − 1), the first token excluded.
//! - ITL (inter-token latency): each gap between consecutive tokens (n − 1 gaps).
//! - E2EL (end-to-end latency): from the start to the last token.
//! - decode tokens/s: (generated − 1) / (E2EL − TTFT); prefill tokens/s: prompt / prefill.
use crate::engine::DecodeMode;
use crate::model::decoder::ffn::moe::ExpertCounts;
use serde::Serialize;
use std::time::Duration;

/// p50/p90/p99/max/mean of a sample, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Mean (ms).
    pub mean_ms: f64,
    /// Median (ms), linear interpolation as numpy.percentile.
    pub p50_ms: f64,
    /// 90th percentile (ms).
    pub p90_ms: f64,
    /// 99th percentile (ms).
    pub p99_ms: f64,
    /// Largest value (ms).
    pub max_ms: f64,
}

impl Percentiles {
    /// Summarise `values_ms`; all zeros when empty.
    pub fn of(values_ms: &[f64]) -> Percentiles {
        if values_ms.is_empty() {
            return Percentiles::default();
        }
        let mut v = values_ms.to_vec();
        v.sort_by(f64::total_cmp);
        Percentiles {
            mean_ms: v.iter().sum::<f64>() / v.len() as f64,
            p50_ms: percentile(&v, 50.0),
            p90_ms: percentile(&v, 90.0),
            p99_ms: percentile(&v, 99.0),
            max_ms: v[v.len() - 1],
        }
    }
}

/// The q-th percentile (0..=100) of sorted, non-empty `v`, interpolating linearly between
/// closest ranks (numpy's default).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = q / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

/// The paged KV cache at the end of a generation: what it holds, what `kv-size` says it
/// should, and how much of a contiguous reservation would have been used.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KvStats {
    /// Stored dtype (`--kv-cache-dtype`).
    pub dtype: &'static str,
    /// Tokens per block (`--block-size`).
    pub block_size: usize,
    /// Tokens held in the cache (positions: evicted rows included).
    pub tokens: usize,
    /// Of those, rows the full-attention layers evicted (`--kv-evict`; 0 without).
    pub tokens_evicted: usize,
    /// Blocks the sequence holds: `ceil(tokens / block_size)`.
    pub blocks: usize,
    /// Tokens in the last block (the only one that can be partly empty).
    pub last_block_tokens: usize,
    /// Bytes of K and V for the tokens held: `tokens · bytes per token`.
    pub bytes_used: u64,
    /// Bytes of the blocks held, measured from the pool's buffers.
    pub bytes_held: u64,
    /// Bytes the pool's buffers allocate (every block it materialized).
    pub bytes_allocated: u64,
    /// `kv-size` arithmetic for `tokens` tokens (2 · L · T · H_kv · head_dim · bytes).
    pub bytes_estimated: u64,
    /// `kv-size` arithmetic for `tokens` tokens in blocks of `block_size` (`--block-size`).
    pub bytes_estimated_paged: u64,
    /// Tokens a contiguous cache reserves up front: prompt + max_new_tokens, capped at the
    /// context window (what this engine reserved before the block pool).
    pub reserved_tokens: usize,
    /// Bytes of that contiguous reservation, in the same dtype.
    pub reserved_bytes: u64,
    /// The context window in tokens (`max_position_embeddings`).
    pub context_tokens: usize,
    /// Bytes of a contiguous reservation of the whole context window.
    pub context_bytes: u64,
    /// Blocks still in use after the request released its cache (0 unless blocks leak).
    pub blocks_leaked: usize,
    /// Layers with a sliding window whose blocks leave the cache (a hybrid cache; 0
    /// otherwise, and with `--swa-full`).
    pub sliding_layers: usize,
    /// Their window in tokens (0 when none).
    pub sliding_window: usize,
    /// Bytes held by the full-attention layer groups.
    pub bytes_held_full: u64,
    /// Bytes held by the sliding-window layer groups.
    pub bytes_held_sliding: u64,
    /// Bytes a cache keeping every layer's blocks would hold for these tokens (kv-size's
    /// paged full-attention figure: what `--swa-full` holds).
    pub bytes_full_cache: u64,
    /// What a rotated dtype (`q4_0r`, `iq4_nlr`) rotated before quantizing; `None` for the
    /// others.
    pub rotation: Option<KvRotation>,
}

/// The Hadamard rotation a rotated KV dtype applies (`kv::codec_q4::rotate`): to K and V of
/// every KV head in `layers`, each `head_dim` row in `groups` (power-of-two sizes summing
/// to `head_dim`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KvRotation {
    /// The layers whose K and V rows are stored rotated (every layer holding a KV cache).
    pub layers: Vec<usize>,
    /// Values per row (`head_dim`).
    pub head_dim: usize,
    /// The group sizes each row is rotated in, in order.
    pub groups: Vec<usize>,
}

impl KvStats {
    /// Used bytes as a share of the blocks held, in % (100 · used / held).
    pub fn paged_utilisation_pct(&self) -> f64 {
        pct(self.bytes_used, self.bytes_held)
    }

    /// Used bytes as a share of a prompt + max_new_tokens reservation, in %.
    pub fn reserved_utilisation_pct(&self) -> f64 {
        pct(self.bytes_used, self.reserved_bytes)
    }

    /// Used bytes as a share of a full-context reservation, in %.
    pub fn context_utilisation_pct(&self) -> f64 {
        pct(self.bytes_used, self.context_bytes)
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Everything measured about one generation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenerationStats {
    /// Naive or KV-cached decode.
    pub decode_mode: DecodeMode,
    /// Prompt length (tokens).
    pub prompt_tokens: usize,
    /// Tokens sampled, end-of-sequence token included.
    pub generated_tokens: usize,
    /// Time to first token (ms).
    pub ttft_ms: f64,
    /// The prefill forward pass alone (ms).
    pub prefill_ms: f64,
    /// Prompt tokens / prefill time.
    pub prefill_tokens_per_s: f64,
    /// Time per output token after the first (ms); None with fewer than two tokens.
    pub tpot_ms: Option<f64>,
    /// Inter-token latencies (ms); all zeros with fewer than two tokens, where no gap exists
    /// (see [`GenerationStats::itl_ms`], which says `None` then).
    pub itl: Percentiles,
    /// E2EL − TTFT (ms).
    pub decode_ms: f64,
    /// (generated − 1) / decode time; None with fewer than two tokens.
    pub decode_tokens_per_s: Option<f64>,
    /// End-to-end latency (ms).
    pub e2el_ms: f64,
    /// KV cache at the end.
    pub kv_cache: KvStats,
    /// What a mixture of experts' routers did; `None` for a dense model.
    pub moe: Option<MoeStats>,
    /// Speculative decoding's drafts and verify steps; `None` without `--spec`.
    pub spec: Option<crate::engine::spec::SpecReport>,
}

/// A mixture-of-experts model's routing in one generation: how many distinct experts each
/// layer ran per prefill pass and per decode step (the expert weights read: k per token
/// alone, up to all of them over a prompt), the active weight bytes per token, and the router
/// histogram.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MoeStats {
    /// Experts per layer (`num_experts`).
    pub num_experts: usize,
    /// Experts per token (`num_experts_per_tok`).
    pub experts_per_tok: usize,
    /// Prefill passes (chunks of the prompt).
    pub prefill_passes: u64,
    /// Distinct experts a layer ran per prefill pass, mean over layers and passes.
    pub prefill_experts_touched: f64,
    /// Decode steps (forward passes after the prompt; naive decode: whole recomputes).
    pub decode_steps: u64,
    /// Distinct experts a layer ran per decode step, mean over layers and steps.
    pub decode_experts_touched: f64,
    /// Weight bytes one token reads: attention, the router and k experts per layer, the LM
    /// head (`WeightsHeld::active_per_token`).
    pub active_weight_bytes_per_token: u64,
    /// Per layer, per expert: the rows (prompt and generated) that chose it.
    pub router_histogram: Vec<Vec<u64>>,
}

/// Milliseconds of a duration.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl MoeStats {
    /// The routing between three snapshots of a decoder's expert counters (per layer):
    /// before the prompt, after it, at the end; `active` the bytes one token reads.
    pub fn between(
        before: &[ExpertCounts],
        after_prefill: &[ExpertCounts],
        end: &[ExpertCounts],
        (experts, k, active): (usize, usize, u64),
    ) -> MoeStats {
        let prefill: Vec<ExpertCounts> = after_prefill
            .iter()
            .zip(before)
            .map(|(a, b)| a.since(b))
            .collect();
        let decode: Vec<ExpertCounts> = end
            .iter()
            .zip(after_prefill)
            .map(|(a, b)| a.since(b))
            .collect();
        let mean = |c: &[ExpertCounts]| {
            let passes: u64 = c.iter().map(|x| x.passes).sum();
            let touched: u64 = c.iter().map(|x| x.touched).sum();
            match passes {
                0 => 0.0,
                p => touched as f64 / p as f64,
            }
        };
        let per_layer = |c: &[ExpertCounts]| c.first().map_or(0, |x| x.passes);
        MoeStats {
            num_experts: experts,
            experts_per_tok: k,
            prefill_passes: per_layer(&prefill),
            prefill_experts_touched: mean(&prefill),
            decode_steps: per_layer(&decode),
            decode_experts_touched: mean(&decode),
            active_weight_bytes_per_token: active,
            router_histogram: end
                .iter()
                .zip(before)
                .map(|(e, b)| e.since(b).chosen)
                .collect(),
        }
    }
}

impl GenerationStats {
    /// The inter-token latencies, or `None` with fewer than two generated tokens: one token
    /// has no gap, so there is no ITL to report (not a latency of 0).
    pub fn itl_ms(&self) -> Option<Percentiles> {
        (self.generated_tokens >= 2).then_some(self.itl)
    }

    /// Compute the statistics from raw timings: `token_times` holds, for each sampled token,
    /// the time since the request started (so `token_times[0]` is the TTFT).
    pub fn from_timings(
        decode_mode: DecodeMode,
        prompt_tokens: usize,
        prefill: Duration,
        token_times: &[Duration],
        kv_cache: KvStats,
    ) -> GenerationStats {
        let n = token_times.len();
        let ttft_ms = token_times.first().map_or(0.0, |&d| ms(d));
        let e2el_ms = token_times.last().map_or(0.0, |&d| ms(d));
        let gaps: Vec<f64> = token_times.windows(2).map(|w| ms(w[1] - w[0])).collect();
        let decode_ms = e2el_ms - ttft_ms;
        let (tpot_ms, decode_tokens_per_s) = if n >= 2 && decode_ms > 0.0 {
            (
                Some(decode_ms / (n - 1) as f64),
                Some((n - 1) as f64 / (decode_ms / 1e3)),
            )
        } else {
            (None, None)
        };
        let prefill_ms = ms(prefill);
        GenerationStats {
            decode_mode,
            prompt_tokens,
            generated_tokens: n,
            ttft_ms,
            prefill_ms,
            prefill_tokens_per_s: if prefill_ms > 0.0 {
                prompt_tokens as f64 / (prefill_ms / 1e3)
            } else {
                0.0
            },
            tpot_ms,
            itl: Percentiles::of(&gaps),
            decode_ms,
            decode_tokens_per_s,
            e2el_ms,
            kv_cache,
            moe: None,
            spec: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_token_has_no_itl() {
        let s = GenerationStats::from_timings(
            DecodeMode::KvCache,
            3,
            Duration::from_millis(5),
            &[Duration::from_millis(6)],
            KvStats::default(),
        );
        assert_eq!(s.itl_ms(), None);
        assert_eq!(s.tpot_ms, None);
    }

    #[test]
    fn percentiles_match_numpy() {
        // numpy.percentile([1, 2, 3, 4, 10], [50, 90, 99]) = 3.0, 7.6, 9.76
        let p = Percentiles::of(&[4.0, 1.0, 10.0, 3.0, 2.0]);
        assert_eq!(p.p50_ms, 3.0);
        assert!((p.p90_ms - 7.6).abs() < 1e-12);
        assert!((p.p99_ms - 9.76).abs() < 1e-12);
        assert_eq!(p.max_ms, 10.0);
        assert_eq!(p.mean_ms, 4.0);
    }

    #[test]
    fn tpot_excludes_the_first_token() {
        let t = |x: u64| Duration::from_millis(x);
        let s = GenerationStats::from_timings(
            DecodeMode::KvCache,
            10,
            t(90),
            &[t(100), t(110), t(130)],
            KvStats::default(),
        );
        assert_eq!(s.ttft_ms, 100.0);
        assert_eq!(s.e2el_ms, 130.0);
        assert_eq!(s.tpot_ms, Some(15.0));
        assert_eq!(s.decode_tokens_per_s, Some(2.0 / 0.030));
        assert_eq!(s.itl.max_ms, 20.0);
        assert_eq!(s.itl_ms().map(|p| p.max_ms), Some(20.0));
        assert!((s.prefill_tokens_per_s - 10.0 / 0.090).abs() < 1e-9);
    }
}
