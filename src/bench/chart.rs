//! Decode step latency against position, per mode and prompt length: the series, and a
//! compact terminal chart of them (one sparkline per series, on one shared scale).
use crate::bench::plan::BenchMode;
use crate::bench::run::RunSample;
use serde::Serialize;

/// One point of a [`StepSeries`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepPoint {
    /// Position of the generated token in the sequence (tokens).
    pub position: usize,
    /// Mean step latency over the runs (ms).
    pub latency_ms: f64,
}

/// Decode step latency against position for one (mode, prompt length), averaged over the
/// measured runs. The first generated token (its latency is the TTFT) is left out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepSeries {
    /// Decode mode.
    pub mode: BenchMode,
    /// Prompt length (tokens).
    pub prompt_len: usize,
    /// Runs averaged.
    pub runs: usize,
    /// One point per decode step, in position order.
    pub points: Vec<StepPoint>,
}

/// The series of every (prompt length, mode) with samples, prompt length outer.
pub fn step_series(
    samples: &[RunSample],
    modes: &[BenchMode],
    prompt_lens: &[usize],
) -> Vec<StepSeries> {
    let mut out = Vec::new();
    for &prompt_len in prompt_lens {
        for &mode in modes {
            let runs: Vec<&RunSample> = samples
                .iter()
                .filter(|s| s.mode == mode && s.prompt_len == prompt_len)
                .collect();
            let steps = runs.iter().map(|r| r.steps.len()).min().unwrap_or(0);
            if runs.is_empty() || steps < 2 {
                continue;
            }
            let points = (1..steps)
                .map(|i| StepPoint {
                    position: runs[0].steps[i].position,
                    latency_ms: runs.iter().map(|r| r.steps[i].latency_ms).sum::<f64>()
                        / runs.len() as f64,
                })
                .collect();
            out.push(StepSeries {
                mode,
                prompt_len,
                runs: runs.len(),
                points,
            });
        }
    }
    out
}

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Largest latency over all series (ms); 0 when there are none.
pub fn max_latency_ms(series: &[StepSeries]) -> f64 {
    series
        .iter()
        .flat_map(|s| &s.points)
        .map(|p| p.latency_ms)
        .fold(0.0, f64::max)
}

/// Mean latency of `points` in `width` equal buckets (fewer when there are fewer points).
pub fn buckets(points: &[StepPoint], width: usize) -> Vec<f64> {
    let n = points.len();
    let width = width.min(n).max(1);
    (0..width)
        .filter_map(|i| {
            let chunk = &points[i * n / width..(i + 1) * n / width];
            (!chunk.is_empty())
                .then(|| chunk.iter().map(|p| p.latency_ms).sum::<f64>() / chunk.len() as f64)
        })
        .collect()
}

/// A sparkline of `values` scaled so that `max` is a full block; every value shows at least
/// the lowest block.
pub fn sparkline(values: &[f64], max: f64) -> String {
    values
        .iter()
        .map(|&v| {
            let level = if max > 0.0 {
                (v / max * 8.0).ceil() as usize
            } else {
                1
            };
            BARS[level.clamp(1, 8) - 1]
        })
        .collect()
}

/// The terminal chart: one row per series, `width` columns of sparkline on a scale shared by
/// all rows (linear, 0 to the largest mean step latency), with the positions covered and the
/// first and last step latencies. Empty when there are no series.
pub fn render_terminal(series: &[StepSeries], width: usize) -> String {
    if series.is_empty() {
        return String::new();
    }
    let max = max_latency_ms(series);
    let mode_w = series
        .iter()
        .map(|s| s.mode.name().len())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = format!(
        "Decode step latency vs position (mean over runs, first token excluded; one block = {:.2} ms, full height {:.2} ms)\n",
        max / 8.0,
        max
    );
    for s in series {
        let (Some(first), Some(last)) = (s.points.first(), s.points.last()) else {
            continue;
        };
        let line = sparkline(&buckets(&s.points, width), max);
        out.push_str(&format!(
            "  prompt {:>5}  {:<mode_w$}  {line}  positions {}–{}: {:.2} → {:.2} ms\n",
            s.prompt_len,
            s.mode.name(),
            first.position,
            last.position,
            first.latency_ms,
            last.latency_ms,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::run::StepSample;
    use crate::engine::Percentiles;

    fn sample(mode: BenchMode, run: usize, latencies: &[f64]) -> RunSample {
        RunSample {
            mode,
            prompt_len: 4,
            run,
            generated_tokens: latencies.len(),
            ttft_ms: latencies[0],
            prefill_ms: 0.0,
            prefill_tokens_per_s: 0.0,
            tpot_ms: 0.0,
            itl: Percentiles::default(),
            e2el_ms: 0.0,
            decode_tokens_per_s: 0.0,
            kv_tokens: 0,
            kv_bytes_held: 0,
            kv_bytes_full_cache: 0,
            tokens: vec![0; latencies.len()],
            steps: latencies
                .iter()
                .enumerate()
                .map(|(index, &latency_ms)| StepSample {
                    index,
                    position: 4 + index,
                    latency_ms,
                })
                .collect(),
        }
    }

    #[test]
    fn series_average_runs_and_skip_the_first_token() {
        let s = [
            sample(BenchMode::Naive, 1, &[100.0, 2.0, 4.0]),
            sample(BenchMode::Naive, 2, &[100.0, 4.0, 8.0]),
        ];
        let series = step_series(&s, &[BenchMode::Naive, BenchMode::KvCache], &[4]);
        assert_eq!(series.len(), 1);
        assert_eq!(
            series[0].points,
            vec![
                StepPoint {
                    position: 5,
                    latency_ms: 3.0
                },
                StepPoint {
                    position: 6,
                    latency_ms: 6.0
                }
            ]
        );
    }

    #[test]
    fn sparkline_scales_to_the_shared_max() {
        assert_eq!(sparkline(&[0.0, 1.0, 4.0, 8.0], 8.0), "▁▁▄█");
        let pts: Vec<StepPoint> = (0..10)
            .map(|i| StepPoint {
                position: i,
                latency_ms: i as f64,
            })
            .collect();
        assert_eq!(buckets(&pts, 5), vec![0.5, 2.5, 4.5, 6.5, 8.5]);
        assert_eq!(buckets(&pts[..3], 5).len(), 3);
        let chart = render_terminal(
            &step_series(
                &[sample(BenchMode::KvCache, 1, &[9.0, 1.0, 2.0])],
                &[BenchMode::KvCache],
                &[4],
            ),
            40,
        );
        assert!(
            chart.contains("kv-cache") && chart.contains("positions 5–6: 1.00 → 2.00 ms"),
            "{chart}"
        );
    }
}
