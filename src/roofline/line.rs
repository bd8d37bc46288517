//! The roofline line of one run: each phase's work (FLOPs, bytes), its time, the achieved
//! GFLOP/s and GB/s, its arithmetic intensity, and, when the machine's limits were measured,
//! how far it is from the roof that binds it.
use crate::engine::DecodeMode;
use crate::kv::KvDtype;
use crate::model::ModelConfig;
use crate::roofline::counts::{
    decode_step_bytes, decode_step_flops, forward_flops, kv_bytes_per_position, mean_decode_keys,
    prefill_bytes, prefill_flops,
};
use crate::roofline::peak::MachineLimits;
use crate::roofline::weights::ModelWeights;
use serde::Serialize;

/// What a run did: enough to count its work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunShape {
    /// Prompt tokens.
    pub prompt: u64,
    /// Generated tokens (the first comes from prefill).
    pub generated: u64,
    /// KV-cached or naive decode.
    pub mode: DecodeMode,
    /// The KV cache's stored dtype.
    pub kv_dtype: KvDtype,
}

/// Which roof binds a phase: its intensity against the machine's ridge point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Bound {
    /// Intensity at or above the ridge: the f32 FMA peak is the limit.
    #[serde(rename = "compute-bound")]
    Compute,
    /// Intensity below the ridge: bandwidth · intensity is the limit.
    #[serde(rename = "memory-bound")]
    Memory,
}

impl Bound {
    /// `compute-bound` or `memory-bound`.
    pub fn name(self) -> &'static str {
        match self {
            Bound::Compute => "compute-bound",
            Bound::Memory => "memory-bound",
        }
    }
}

/// One phase: prefill (the whole prompt) or decode (per generated token, mean of the steps).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Phase {
    /// FLOPs ([`crate::roofline::counts`]).
    pub flops: f64,
    /// Bytes moved: weights read + K/V ([`crate::roofline::counts`]).
    pub bytes: f64,
    /// Time (ms): the prefill forward pass, or TPOT for decode.
    pub ms: f64,
    /// flops / time (GFLOP/s, 10^9 FLOP/s).
    pub gflop_s: f64,
    /// bytes / time (GB/s, 10^9 bytes/s).
    pub gb_s: f64,
    /// Arithmetic intensity: flops / bytes (FLOP/byte).
    pub flop_per_byte: f64,
    /// 100 · gflop_s / the measured f32 FMA peak (%), when measured.
    pub pct_of_f32_peak: Option<f64>,
    /// 100 · gb_s / the measured read bandwidth (%), when measured.
    pub pct_of_bandwidth: Option<f64>,
    /// 100 · gb_s / the read bandwidth over a buffer the size of the decode weights (%,
    /// [`crate::roofline::peak::WorkingSetRead`]), when measured; set by
    /// [`RooflineLine::new`] for KV-cached decode only (None for prefill and naive decode,
    /// which read more than that).
    pub pct_of_working_set_read: Option<f64>,
    /// Which roof binds it (intensity against the ridge point), when measured.
    pub bound: Option<Bound>,
}

impl Phase {
    /// Figures of `flops` and `bytes` done in `ms`, against `limits` when given.
    pub fn new(flops: f64, bytes: f64, ms: f64, limits: Option<&MachineLimits>) -> Phase {
        let s = ms / 1e3;
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        let gflop_s = ratio(flops, s) / 1e9;
        let gb_s = ratio(bytes, s) / 1e9;
        let flop_per_byte = ratio(flops, bytes);
        Phase {
            flops,
            bytes,
            ms,
            gflop_s,
            gb_s,
            flop_per_byte,
            pct_of_f32_peak: limits.map(|l| 100.0 * ratio(gflop_s, l.f32_gflops)),
            pct_of_bandwidth: limits.map(|l| 100.0 * ratio(gb_s, l.read_gb_s)),
            pct_of_working_set_read: None,
            bound: limits.map(|l| {
                if flop_per_byte >= l.ridge_flop_per_byte() {
                    Bound::Compute
                } else {
                    Bound::Memory
                }
            }),
        }
    }
}

/// A run's roofline figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RooflineLine {
    /// Prefill of the whole prompt (the first forward pass; logits of the last row only).
    pub prefill: Phase,
    /// Per decode step (per generated token after the first), mean over the run's steps;
    /// None with fewer than two generated tokens.
    pub decode: Option<Phase>,
}

impl RooflineLine {
    /// The figures of a run of shape `run` on model `c` with weights `w`, whose prefill
    /// forward pass took `prefill_ms` and whose decode steps `tpot_ms` each (TPOT, sampling
    /// included), against `limits` when measured.
    ///
    /// Decode, KV-cached: per step [`decode_step_flops`] and [`decode_step_bytes`] at the
    /// mean keys `prompt + generated / 2` ([`mean_decode_keys`]; both are linear in keys).
    /// Decode, naive: step k (1 ≤ k < generated) recomputes all `prompt + k` positions,
    /// `forward_flops(c, 0, prompt + k, 1)`, reading the prefill copy for the prompt rows
    /// (when it is a separate copy) and the decode matrices for the generated rows and the
    /// LM head, and writing `prompt + k` positions of K/V; the mean over the steps.
    pub fn new(
        c: &ModelConfig,
        w: &ModelWeights,
        run: RunShape,
        prefill_ms: f64,
        tpot_ms: Option<f64>,
        limits: Option<&MachineLimits>,
    ) -> RooflineLine {
        let p_flops = prefill_flops(c, run.prompt).total() as f64;
        let p_bytes = prefill_bytes(c, w.prefill_for(run.prompt), run.kv_dtype, run.prompt).total();
        let prefill = Phase::new(p_flops, p_bytes, prefill_ms, limits);
        let decode = match (tpot_ms, mean_decode_keys(run.prompt, run.generated)) {
            (Some(ms), Some(keys)) => {
                let (flops, bytes) = match run.mode {
                    DecodeMode::KvCache => {
                        let at = |k: u64| decode_step_flops(c, k).total() as f64;
                        // Linear in keys: the mean step is the step at the mean keys.
                        let (lo, hi) = (keys.floor() as u64, keys.ceil() as u64);
                        let flops = at(lo) + (at(hi) - at(lo)) * (keys - lo as f64);
                        let bytes = decode_step_bytes(c, w.decode, run.kv_dtype, keys).total();
                        (flops, bytes)
                    }
                    DecodeMode::Naive => naive_step_means(c, w, run),
                };
                let mut d = Phase::new(flops, bytes, ms, limits);
                // The read over the decode weights' size is the roof of the one phase that
                // reads just those weights, KV-cached decode; a prefill (the f32 copy) and a
                // naive step (a prefill's work) read more than any cache holds.
                if run.mode == DecodeMode::KvCache {
                    d.pct_of_working_set_read = limits
                        .and_then(|l| l.working_set)
                        .filter(|w| w.read_gb_s > 0.0)
                        .map(|w| 100.0 * d.gb_s / w.read_gb_s);
                }
                Some(d)
            }
            _ => None,
        };
        RooflineLine { prefill, decode }
    }
}

/// Mean FLOPs and bytes of a naive decode step over k = 1 .. generated − 1.
fn naive_step_means(c: &ModelConfig, w: &ModelWeights, run: RunShape) -> (f64, f64) {
    let weights = if w.separate_prefill_copy && run.prompt > 0 {
        // The prompt rows' f32 copy and the decode matrices; a short prompt's rows read
        // the blocks that decode reads anyway.
        if w.prompt_reads_blocks(run.prompt) {
            w.decode.total()
        } else {
            w.prefill.layers + w.decode.total()
        }
    } else {
        w.decode.total()
    } as f64;
    let kv = kv_bytes_per_position(c, run.kv_dtype) as f64;
    let steps = run.generated.saturating_sub(1).max(1);
    let (mut flops, mut bytes) = (0f64, 0f64);
    for k in 1..run.generated.max(2) {
        let n = run.prompt + k;
        flops += forward_flops(c, 0, n, 1).total() as f64;
        bytes += weights + n as f64 * kv;
    }
    (flops / steps as f64, bytes / steps as f64)
}

/// `27.81 GFLOP`, `304.9 MFLOP`: FLOPs with a decimal SI prefix.
pub fn flops_text(flops: f64) -> String {
    si(flops, "FLOP")
}

/// `96.44 MB`, `2.95 GB`: bytes with a decimal SI prefix (MB = 10^6, GB = 10^9 bytes).
pub fn bytes_text(bytes: f64) -> String {
    si(bytes, "B")
}

fn si(v: f64, unit: &str) -> String {
    let (div, prefix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(d, _)| v.abs() >= *d)
        .unwrap_or((1.0, ""));
    let x = v / div;
    let digits = if x.abs() >= 100.0 { 1 } else { 2 };
    format!("{x:.digits$} {prefix}{unit}")
}

impl RooflineLine {
    /// The prefill half of the `--show-stats` line, e.g. `27.81 GFLOP, 540.9 MB in 323.0 ms
    /// = 86.1 GFLOP/s (46.8% of the 184.0 GFLOP/s f32 peak), 51.4 FLOP/byte: compute-bound`.
    pub fn prefill_text(&self, limits: Option<&MachineLimits>) -> String {
        let p = &self.prefill;
        format!(
            "{}, {} in {:.1} ms = {:.1} GFLOP/s{}",
            flops_text(p.flops),
            bytes_text(p.bytes),
            p.ms,
            p.gflop_s,
            p.roof_text(limits)
        )
    }

    /// The decode half, e.g. `100.9 MB, 282.2 MFLOP per token in 9.72 ms = 10.38 GB/s, 29.0
    /// GFLOP/s (53.8% of the 19.30 GB/s read bandwidth), 2.8 FLOP/byte: memory-bound`.
    /// None without a decode step.
    pub fn decode_text(&self, limits: Option<&MachineLimits>) -> Option<String> {
        let d = self.decode.as_ref()?;
        Some(format!(
            "{}, {} per token in {:.2} ms = {:.2} GB/s, {:.1} GFLOP/s{}",
            bytes_text(d.bytes),
            flops_text(d.flops),
            d.ms,
            d.gb_s,
            d.gflop_s,
            d.roof_text(limits)
        ))
    }
}

/// What a memory-bound phase above 100% of the read bandwidth means. Seen on this project's
/// Xeon VM (2026-12-01): decode at 109.5% of 21.87 GB/s, its 101 MB of weights and K/V
/// read from a last-level cache the CPU reports as 300 MiB.
pub const ABOVE_BANDWIDTH: &str = "above 100%: some of the bytes came from the CPU's caches, not memory (the roof is read bandwidth from memory, over a buffer larger than the caches; weights that fit in the last-level cache can beat it)";

impl Phase {
    /// True when this phase is memory-bound and ran above 100% of the measured read
    /// bandwidth ([`ABOVE_BANDWIDTH`] says what that means).
    pub fn above_bandwidth(&self) -> bool {
        self.bound == Some(Bound::Memory) && self.pct_of_bandwidth.is_some_and(|v| v > 100.0)
    }

    /// 100 · achieved / the roof that binds this phase (%): the f32 peak when
    /// compute-bound, the read bandwidth when memory-bound — either way the share of the
    /// attainable `min(peak, bandwidth · intensity)`. None when not measured.
    pub fn pct_of_roof(&self) -> Option<f64> {
        match self.bound? {
            Bound::Compute => self.pct_of_f32_peak,
            Bound::Memory => self.pct_of_bandwidth,
        }
    }

    /// ` (53.8% of the 19.30 GB/s read bandwidth), 2.8 FLOP/byte: memory-bound` against
    /// `limits`, or just `, 2.8 FLOP/byte` without them.
    fn roof_text(&self, limits: Option<&MachineLimits>) -> String {
        let roof = match (self.bound, limits) {
            (Some(Bound::Compute), Some(l)) => format!(
                " ({:.1}% of the {:.1} GFLOP/s f32 peak)",
                self.pct_of_f32_peak.unwrap_or(f64::NAN),
                l.f32_gflops
            ),
            (Some(Bound::Memory), Some(l)) => {
                let pct = self.pct_of_bandwidth.unwrap_or(f64::NAN);
                let above = if self.above_bandwidth() {
                    format!("; {ABOVE_BANDWIDTH}")
                } else {
                    String::new()
                };
                let cached = match (l.working_set, self.pct_of_working_set_read) {
                    (Some(w), Some(p)) => format!(
                        "; {p:.1}% of the {:.2} GB/s read over {}, the decode weights' size",
                        w.read_gb_s,
                        bytes_text(w.bytes as f64)
                    ),
                    _ => String::new(),
                };
                format!(
                    " ({pct:.1}% of the {:.2} GB/s read bandwidth{above}{cached})",
                    l.read_gb_s
                )
            }
            _ => String::new(),
        };
        let bound = match (self.bound, limits) {
            (Some(b), Some(_)) => format!(": {}", b.name()),
            _ => String::new(),
        };
        format!("{roof}, {:.1} FLOP/byte{bound}", self.flop_per_byte)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roofline::counts::tests::{smollm2, tiny};
    use crate::roofline::counts::WeightBytes;

    fn limits() -> MachineLimits {
        MachineLimits {
            kernel: "avx2+fma",
            fma_lanes: 8,
            int8_kernel: "vpmaddubsw + vpmaddwd",
            threads: 2,
            f32_gflops_per_core: 100.0,
            f32_gflops: 200.0,
            int8_gops_per_core: 200.0,
            int8_gops: 400.0,
            read_gb_s_per_core: 12.0,
            read_gb_s: 20.0,
            buffer_bytes: 512 << 20,
            measure_ms: 1000.0,
            working_set: None,
            other_processes_cpus: None,
        }
    }

    fn weights(c: &ModelConfig) -> ModelWeights {
        ModelWeights {
            decode: WeightBytes {
                layers: 66_355_200,
                lm_head: 30_081_024,
            },
            prefill: WeightBytes::uniform(c, 4),
            separate_prefill_copy: true,
            prefill_from_blocks: false,
        }
    }

    #[test]
    fn smollm2_line_by_hand() {
        let c = smollm2();
        let run = RunShape {
            prompt: 128,
            generated: 128,
            mode: DecodeMode::KvCache,
            kv_dtype: KvDtype::F16,
        };
        let l = limits();
        let line = RooflineLine::new(&c, &weights(&c), run, 278.06367744, Some(10.0), Some(&l));
        // 27,806,367,744 FLOP in 0.27806367744 s = 100 GFLOP/s = 50% of 200.
        let p = line.prefill;
        assert!((p.gflop_s - 100.0).abs() < 1e-9);
        assert!((p.pct_of_f32_peak.unwrap_or(0.0) - 50.0).abs() < 1e-9);
        // bytes: 537,919,488 f32 weights + 128 · 23,040 K/V = 540,868,608.
        assert_eq!(p.bytes, 540_868_608.0);
        assert_eq!(p.bound, Some(Bound::Compute)); // 51.4 FLOP/byte ≥ ridge 10
                                                   // Decode at the mean 192 keys: 96,436,224 + 192 · 23,040 = 100,859,904 bytes in 10 ms.
        let d = line.decode.expect("decode");
        assert_eq!(d.bytes, 100_859_904.0);
        assert!((d.gb_s - 10.0859904).abs() < 1e-9);
        assert!((d.pct_of_bandwidth.unwrap_or(0.0) - 50.429952).abs() < 1e-9);
        // FLOPs: 212,336,640 + 56,623,104 + 4 · 30 · 576 · 192 = 282,230,784.
        assert_eq!(d.flops, 282_230_784.0);
        assert_eq!(d.bound, Some(Bound::Memory));
        let text = line.decode_text(Some(&l)).unwrap_or_default();
        assert!(text.contains("100.9 MB, 282.2 MFLOP per token"), "{text}");
        assert!(
            text.contains("(50.4% of the 20.00 GB/s read bandwidth)"),
            "{text}"
        );
        assert!(text.ends_with("2.8 FLOP/byte: memory-bound"), "{text}");
        assert_eq!(
            line.prefill_text(None),
            "27.81 GFLOP, 540.9 MB in 278.1 ms = 100.0 GFLOP/s, 51.4 FLOP/byte"
        );
        assert!(line
            .prefill_text(Some(&l))
            .contains("(50.0% of the 200.0 GFLOP/s f32 peak), 51.4 FLOP/byte: compute-bound"));
        assert_eq!(p.pct_of_roof(), p.pct_of_f32_peak);
        assert_eq!(d.pct_of_roof(), d.pct_of_bandwidth);
        assert!(!text.contains("caches"), "{text}");
        // The same decode in 4.0 ms: 25.2 GB/s, 126.1% of 20 GB/s, so some bytes came from
        // the caches, and the line says so.
        let fast = RooflineLine::new(&c, &weights(&c), run, 278.06367744, Some(4.0), Some(&l));
        let text = fast.decode_text(Some(&l)).unwrap_or_default();
        assert!(
            text.contains("(126.1% of the 20.00 GB/s read bandwidth; above 100%: some of the bytes came from the CPU's caches"),
            "{text}"
        );
        assert_eq!(fast.decode.map(|d| d.pct_of_working_set_read), Some(None));
        // With the read over a buffer of the decode weights measured at 40 GB/s: the same
        // 25.21 GB/s is 63.0% of it (25.2149760 / 40), and the line gives both.
        let cached = MachineLimits {
            working_set: Some(crate::roofline::peak::WorkingSetRead {
                bytes: 96_436_224,
                read_gb_s: 40.0,
            }),
            ..l
        };
        let fast = RooflineLine::new(
            &c,
            &weights(&c),
            run,
            278.06367744,
            Some(4.0),
            Some(&cached),
        );
        let d = fast.decode.expect("decode");
        assert!((d.pct_of_working_set_read.unwrap_or(0.0) - 63.037440).abs() < 1e-9);
        assert_eq!(d.pct_of_roof(), d.pct_of_bandwidth);
        let text = fast.decode_text(Some(&cached)).unwrap_or_default();
        assert!(
            text.contains("; 63.0% of the 40.00 GB/s read over 96.44 MB, the decode weights' size), 2.8 FLOP/byte: memory-bound"),
            "{text}"
        );
        // Prefill reads the f32 copy, not the decode weights: no share of that read.
        assert_eq!(fast.prefill.pct_of_working_set_read, None);
        let text = fast.prefill_text(Some(&cached));
        assert!(!text.contains("read over"), "{text}");
    }

    /// The tiny config's weights: 100 + 10 bytes quantized, 400 + 40 as the f32 copy.
    fn tiny_weights(prefill_from_blocks: bool) -> ModelWeights {
        ModelWeights {
            decode: WeightBytes {
                layers: 100,
                lm_head: 10,
            },
            prefill: WeightBytes {
                layers: 400,
                lm_head: 40,
            },
            separate_prefill_copy: true,
            prefill_from_blocks,
        }
    }

    /// Where the dense prefill reads the GGUF blocks for a short prompt and for the LM
    /// head's row, the bytes follow: prefill of 3 tokens (≤ 8) reads the blocks (100 + 10),
    /// of 9 tokens the f32 layers and the blocks' LM head (400 + 10); a naive step after a
    /// 3-token prompt reads only the decode matrices (110). K/V: 64 bytes per position.
    #[test]
    fn short_prompts_and_the_lm_head_row_read_the_blocks() {
        let c = tiny();
        let w = tiny_weights(true);
        let run = |prompt, mode| RunShape {
            prompt,
            generated: 3,
            mode,
            kv_dtype: KvDtype::F32,
        };
        let short = RooflineLine::new(&c, &w, run(3, DecodeMode::Naive), 1.0, Some(1.0), None);
        assert_eq!(short.prefill.bytes, 110.0 + 3.0 * 64.0);
        // Naive steps of 4 and 5 positions: 110 + 256, 110 + 320; mean 398.
        assert_eq!(short.decode.expect("decode").bytes, 398.0);
        let long = RooflineLine::new(&c, &w, run(9, DecodeMode::KvCache), 1.0, None, None);
        assert_eq!(long.prefill.bytes, 410.0 + 9.0 * 64.0);
        let f32_only = ModelWeights {
            prefill_from_blocks: false,
            ..w
        };
        let long = RooflineLine::new(&c, &f32_only, run(9, DecodeMode::KvCache), 1.0, None, None);
        assert_eq!(long.prefill.bytes, 440.0 + 9.0 * 64.0);
    }

    #[test]
    fn naive_steps_by_hand_on_the_tiny_config() {
        let c = tiny();
        let w = tiny_weights(false);
        let run = RunShape {
            prompt: 3,
            generated: 3,
            mode: DecodeMode::Naive,
            kv_dtype: KvDtype::F32,
        };
        let line = RooflineLine::new(&c, &w, run, 1.0, Some(1.0), None);
        let d = line.decode.expect("decode");
        // Steps k = 1, 2: n = 4 and 5 positions. linear 2·n·2·576, attention
        // 4·2·8·n(n+1)/2, LM head 160: n = 4: 9,216 + 640 + 160 = 10,016;
        // n = 5: 11,520 + 960 + 160 = 12,640; mean 11,328.
        assert_eq!(d.flops, 11_328.0);
        // bytes: 400 + 110 weights + n · 64 K/V: 766 and 830, mean 798.
        assert_eq!(d.bytes, 798.0);
        assert_eq!(d.pct_of_f32_peak, None);
        assert_eq!(line.decode_text(None).map(|t| t.contains('%')), Some(false));
        // A naive step does a prefill's work: no share of the read over the decode weights'
        // size, even when it was measured (as KV-cached decode gets).
        let cached = MachineLimits {
            working_set: Some(crate::roofline::peak::WorkingSetRead {
                bytes: 110,
                read_gb_s: 40.0,
            }),
            ..limits()
        };
        let measured = RooflineLine::new(&c, &w, run, 1.0, Some(1.0), Some(&cached));
        assert_eq!(
            measured.decode.map(|d| d.pct_of_working_set_read),
            Some(None)
        );
        let kv = RooflineLine::new(
            &c,
            &w,
            RunShape {
                mode: DecodeMode::KvCache,
                ..run
            },
            1.0,
            Some(1.0),
            Some(&cached),
        );
        assert!(kv.decode.and_then(|d| d.pct_of_working_set_read).is_some());
        // One token: no decode step.
        let one = RooflineLine::new(
            &c,
            &w,
            RunShape {
                generated: 1,
                ..run
            },
            1.0,
            None,
            None,
        );
        assert_eq!(one.decode, None);
    }
}
