//! The roofline line of one run: each phase's work (FLOPs, bytes), its time, the achieved
//! GFLOP/s and GB/s, its arithmetic intensity, and, when the machine's limits were measured,
//! how far it is from the roof that binds it.
use crate::engine::DecodeMode;
use crate::kv::KvDtype;
use crate::model::decoder::attention::MlaPath;
use crate::model::ModelConfig;
use crate::roofline::counts::{
    decode_step_bytes, expanded_decode_extra, forward_flops, forward_flops_on,
    kv_bytes_per_position, mean_decode_keys, prefill_bytes,
};
use crate::roofline::limits::MachineLimits;
pub use crate::roofline::si::bytes_text;
use crate::roofline::si::si;
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
    /// The path MLA's rows attend by (`--mla-path`); ignored without MLA.
    pub mla_path: MlaPath,
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
    /// FLOPs ([`crate::roofline::counts`]); JSON: an integer (decode's mean over the
    /// steps rounded to the nearest FLOP).
    #[serde(serialize_with = "whole")]
    pub flops: f64,
    /// Bytes moved: weights read + K/V ([`crate::roofline::counts`]); JSON: an integer
    /// (exact for prefill; decode's mean over the steps rounded to the nearest byte).
    #[serde(serialize_with = "whole")]
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

/// A count kept as f64 (a mean may be fractional) written to JSON as the nearest integer.
fn whole<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() && *v >= 0.0 && *v < u64::MAX as f64 {
        s.serialize_u64(v.round() as u64)
    } else {
        s.serialize_none()
    }
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
            pct_of_f32_peak: limits.map(|l| 100.0 * ratio(gflop_s, l.f32_gflop_s)),
            pct_of_bandwidth: limits.map(|l| 100.0 * ratio(gb_s, l.read_gb_s)),
            pct_of_working_set_read: None,
            bound: limits.map(|l| {
                if flop_per_byte >= l.ridge_flop_per_byte {
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
    /// Decode, KV-cached: per step
    /// [`decode_step_flops`](crate::roofline::counts::decode_step_flops) and
    /// [`decode_step_bytes`] at the mean keys `prompt + generated / 2`
    /// ([`mean_decode_keys`]; both are linear in keys).
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
        let p_flops = forward_flops_on(c, 0, run.prompt, 1, run.mla_path).total() as f64;
        let p_bytes = prefill_bytes(c, w.prefill_for(run.prompt), run.kv_dtype, run.prompt).total();
        let prefill = Phase::new(p_flops, p_bytes, prefill_ms, limits);
        let decode = match (tpot_ms, mean_decode_keys(run.prompt, run.generated)) {
            (Some(ms), Some(keys)) => {
                let (flops, bytes) = match run.mode {
                    // Sliding-window layers read their window's keys (swa-full: every key,
                    // the window a mask).
                    DecodeMode::KvCache | DecodeMode::SwaFull => {
                        let full;
                        let c = match run.mode {
                            DecodeMode::SwaFull => {
                                full = ModelConfig {
                                    layer_windows: vec![None; c.num_hidden_layers],
                                    ..c.clone()
                                };
                                &full
                            }
                            _ => c,
                        };
                        let at = |k: u64| {
                            let f = forward_flops_on(c, k.saturating_sub(1), 1, 1, run.mla_path);
                            f.total() as f64
                        };
                        // Linear in keys: the mean step is the step at the mean keys.
                        let (lo, hi) = (keys.floor() as u64, keys.ceil() as u64);
                        let flops = at(lo) + (at(hi) - at(lo)) * (keys - lo as f64);
                        let bytes = decode_step_bytes(c, w.decode, run.kv_dtype, keys).total();
                        let (f_x, b_x) = expanded_decode_extra(c, keys, run.mla_path);
                        (flops + f_x, bytes + b_x)
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

/// What a memory-bound phase above 100% of the read bandwidth means: weights and K/V read
/// from a large last-level cache (seen: docs/benchmarks.md, "Phases above 100% of a roof").
pub const ABOVE_BANDWIDTH: &str = "above 100%: some of the bytes came from the CPU's caches, not memory — the roof is read bandwidth from memory, over a buffer larger than the caches, and weights that fit in the last-level cache can beat it";

/// Whether a percentage reads above 100.0 as printed (one decimal): 100.04 prints 100.0 and
/// is not above.
fn above_100(pct: Option<f64>) -> bool {
    pct.is_some_and(|v| (v * 10.0).round() > 1000.0)
}

/// What a compute-bound phase above 100% of the f32 peak means: no kernel runs faster than
/// the peak's independent FMA chains, so the peak was measured low (seen:
/// docs/benchmarks.md, "Phases above 100% of a roof").
pub const ABOVE_PEAK: &str = "above 100% of the f32 peak: the peak was measured low, at a moment its threads did not all run at full speed — other processes, the hypervisor's steal time, or two hardware threads of one core; the limits line names the first two when it saw them; measure again";

impl Phase {
    /// True when this phase is compute-bound and ran above 100% of the measured f32 peak
    /// ([`ABOVE_PEAK`] says what that means).
    pub fn above_peak(&self) -> bool {
        self.bound == Some(Bound::Compute) && above_100(self.pct_of_f32_peak)
    }

    /// True when this phase is memory-bound and ran above 100% of the measured read
    /// bandwidth ([`ABOVE_BANDWIDTH`] says what that means).
    pub fn above_bandwidth(&self) -> bool {
        self.bound == Some(Bound::Memory) && above_100(self.pct_of_bandwidth)
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
                " ({:.1}% of the {:.1} GFLOP/s f32 peak{})",
                self.pct_of_f32_peak.unwrap_or(f64::NAN),
                l.f32_gflop_s,
                if self.above_peak() {
                    format!("; {ABOVE_PEAK}")
                } else {
                    String::new()
                }
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
mod tests;
