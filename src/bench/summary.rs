//! Aggregation: mean ± std and min per (mode, prompt length), and the speedups of each mode
//! over the baseline, computed from the same [`RunSample`]s the report lists.
use crate::bench::plan::BenchMode;
use crate::bench::run::RunSample;
use serde::Serialize;

/// Mean, sample standard deviation, min and max of one metric over runs, in the metric's
/// unit (the field name that holds it says which: `_ms`, `_tokens_per_s`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stat {
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator); 0 for a single run.
    pub std: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Number of values.
    pub n: usize,
}

impl Stat {
    /// Summarise `values`; all zeros when empty.
    pub fn of(values: &[f64]) -> Stat {
        let n = values.len();
        if n == 0 {
            return Stat::default();
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let std = if n > 1 {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Stat {
            mean,
            std,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n,
        }
    }
}

/// The measured runs of one (mode, prompt length), summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Decode mode.
    pub mode: BenchMode,
    /// Prompt length (tokens).
    pub prompt_len: usize,
    /// Measured runs summarised.
    pub runs: usize,
    /// Time to first token (ms).
    pub ttft_ms: Stat,
    /// Time per output token after the first (ms).
    pub tpot_ms: Stat,
    /// Per-run median inter-token latency (ms).
    pub itl_p50_ms: Stat,
    /// Per-run 99th-percentile inter-token latency (ms).
    pub itl_p99_ms: Stat,
    /// End-to-end latency (ms).
    pub e2el_ms: Stat,
    /// Decode throughput (tokens/s).
    pub decode_tokens_per_s: Stat,
    /// Prefill throughput (tokens/s).
    pub prefill_tokens_per_s: Stat,
}

impl Summary {
    /// Summarise the samples of `mode` at `prompt_len` in `samples` (others are skipped);
    /// None when there are none.
    pub fn of(samples: &[RunSample], mode: BenchMode, prompt_len: usize) -> Option<Summary> {
        let runs: Vec<&RunSample> = samples
            .iter()
            .filter(|s| s.mode == mode && s.prompt_len == prompt_len)
            .collect();
        if runs.is_empty() {
            return None;
        }
        let stat =
            |f: fn(&RunSample) -> f64| Stat::of(&runs.iter().map(|s| f(s)).collect::<Vec<_>>());
        Some(Summary {
            mode,
            prompt_len,
            runs: runs.len(),
            ttft_ms: stat(|s| s.ttft_ms),
            tpot_ms: stat(|s| s.tpot_ms),
            itl_p50_ms: stat(|s| s.itl.p50_ms),
            itl_p99_ms: stat(|s| s.itl.p99_ms),
            e2el_ms: stat(|s| s.e2el_ms),
            decode_tokens_per_s: stat(|s| s.decode_tokens_per_s),
            prefill_tokens_per_s: stat(|s| s.prefill_tokens_per_s),
        })
    }
}

/// Summaries for every (prompt length, mode) present, prompt length outer, in the order of
/// `prompt_lens` and `modes`.
pub fn summarize(
    samples: &[RunSample],
    modes: &[BenchMode],
    prompt_lens: &[usize],
) -> Vec<Summary> {
    prompt_lens
        .iter()
        .flat_map(|&len| {
            modes
                .iter()
                .filter_map(move |&mode| Summary::of(samples, mode, len))
        })
        .collect()
}

/// How much faster `mode` is than `baseline` at one prompt length, from the means of the
/// runs (the names are vLLM's and llama-bench's). A value above 1 means `mode` is faster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Speedup {
    /// Prompt length (tokens).
    pub prompt_len: usize,
    /// The mode compared against (`naive` when it is listed).
    pub baseline: BenchMode,
    /// The mode whose speedup this is.
    pub mode: BenchMode,
    /// mean TPOT of `baseline` / mean TPOT of `mode` (×).
    pub tpot: f64,
    /// mean E2EL of `baseline` / mean E2EL of `mode` (×).
    pub e2el: f64,
    /// mean decode tokens/s of `mode` / mean decode tokens/s of `baseline` (×).
    pub decode_tokens_per_s: f64,
}

/// The speedup of every non-baseline mode over `baseline`, per prompt length, computed from
/// `summaries` (themselves computed from the report's samples).
pub fn speedups(summaries: &[Summary], baseline: BenchMode) -> Vec<Speedup> {
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    summaries
        .iter()
        .filter(|s| s.mode != baseline)
        .filter_map(|s| {
            let base = summaries
                .iter()
                .find(|b| b.mode == baseline && b.prompt_len == s.prompt_len)?;
            Some(Speedup {
                prompt_len: s.prompt_len,
                baseline,
                mode: s.mode,
                tpot: ratio(base.tpot_ms.mean, s.tpot_ms.mean),
                e2el: ratio(base.e2el_ms.mean, s.e2el_ms.mean),
                decode_tokens_per_s: ratio(
                    s.decode_tokens_per_s.mean,
                    base.decode_tokens_per_s.mean,
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Percentiles;

    pub(crate) fn sample(
        mode: BenchMode,
        prompt_len: usize,
        run: usize,
        tpot_ms: f64,
        e2el_ms: f64,
    ) -> RunSample {
        RunSample {
            mode,
            prompt_len,
            run,
            generated_tokens: 3,
            ttft_ms: 10.0,
            prefill_ms: 9.0,
            prefill_tokens_per_s: 1000.0,
            tpot_ms,
            itl: Percentiles::default(),
            e2el_ms,
            decode_tokens_per_s: 1000.0 / tpot_ms,
            kv_tokens: 0,
            kv_bytes_held: 0,
            kv_bytes_full_cache: 0,
            tokens: vec![1, 2, 3],
            steps: Vec::new(),
        }
    }

    #[test]
    fn stat_matches_numpy() {
        // numpy: mean([2, 4, 4, 4, 5, 5, 7, 9]) = 5, std(ddof=1) = 2.138089935299395
        let s = Stat::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(s.mean, 5.0);
        assert!((s.std - 2.138089935299395).abs() < 1e-12);
        assert_eq!((s.min, s.max, s.n), (2.0, 9.0, 8));
        assert_eq!(Stat::of(&[3.0]).std, 0.0);
        assert_eq!(Stat::of(&[]), Stat::default());
    }

    #[test]
    fn speedups_are_ratios_of_the_means() {
        let (n, k) = (BenchMode::Naive, BenchMode::KvCache);
        let samples = vec![
            sample(n, 8, 1, 40.0, 400.0),
            sample(n, 8, 2, 60.0, 600.0),
            sample(k, 8, 1, 10.0, 100.0),
            sample(k, 8, 2, 10.0, 300.0),
        ];
        let sums = summarize(&samples, &[n, k], &[8]);
        assert_eq!(sums.len(), 2);
        assert_eq!(sums[0].tpot_ms.mean, 50.0);
        let sp = speedups(&sums, n);
        assert_eq!(sp.len(), 1);
        assert_eq!(sp[0].tpot, 5.0);
        assert_eq!(sp[0].e2el, 2.5);
        // mean tokens/s: kv (100 + 100) / 2 = 100; naive (25 + 16.67) / 2 = 20.83
        let want = 100.0 / ((1000.0 / 40.0 + 1000.0 / 60.0) / 2.0);
        assert!((sp[0].decode_tokens_per_s - want).abs() < 1e-12);
    }
}
