//! The roofline section of a benchmark report: the machine's limits, measured before and
//! after the runs (the roofs are each figure's better measurement: [`MachineLimits::best_of`]),
//! and each (mode, prompt length)'s prefill and decode figures under them.
use crate::bench::plan::BenchMode;
use crate::bench::run::RunSample;
use crate::bench::BenchPlan;
use crate::model::ModelConfig;
use crate::roofline::line::{bytes_text, flops_text, ABOVE_BANDWIDTH, ABOVE_PEAK};
use crate::roofline::repeat::{best_of_all, moved_notice};
use crate::roofline::{Bound, MachineLimits, ModelWeights, Phase, RooflineLine, RunShape};
use crate::units::num;
use anyhow::{anyhow, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use serde::Serialize;

/// One (mode, prompt length): the means of its measured runs and their roofline figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RooflinePoint {
    /// Decode mode.
    pub mode: BenchMode,
    /// Prompt length (tokens).
    pub prompt_len: usize,
    /// Generated tokens per run.
    pub generated: usize,
    /// Mean prefill forward pass over the runs (ms).
    pub prefill_ms: f64,
    /// Mean TPOT over the runs (ms).
    pub tpot_ms: f64,
    /// Prefill and decode figures at those means.
    #[serde(flatten)]
    pub line: RooflineLine,
}

/// The report's roofline section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchRoofline {
    /// This machine's limits: each figure the best of [`BenchRoofline::measurements`].
    pub limits: MachineLimits,
    /// Every measurement of the limits, in order (before the runs, after them): how far
    /// they moved shows whether something else shared the machine during the run.
    pub measurements: Vec<MachineLimits>,
    /// Weight bytes each phase's kernels read.
    pub weights: ModelWeights,
    /// One point per (prompt length, mode) with runs, in the report's order.
    pub points: Vec<RooflinePoint>,
}

impl BenchRoofline {
    /// The figures of every (prompt length, mode) of `plan` that has runs in `samples`.
    /// MLA's rows are counted on `mla_path`. `weights` are what a dense prompt reads; a prompt for which `dense_prompt(len)` is
    /// false (`--prefill-kernel auto` below its threshold) ran on the quantized kernels and
    /// is counted with [`ModelWeights::for_quantized_prompts`]. The roofs are the best of
    /// `measurements` ([`best_of_all`]). Errors: `measurements` is empty.
    pub fn new(
        config: &ModelConfig,
        mla_path: crate::model::decoder::attention::MlaPath,
        weights: ModelWeights,
        dense_prompt: impl Fn(usize) -> bool,
        measurements: Vec<MachineLimits>,
        plan: &BenchPlan,
        samples: &[RunSample],
    ) -> Result<BenchRoofline> {
        let limits = best_of_all(&measurements)
            .ok_or_else(|| anyhow!("no measurement of this machine's limits"))?;
        let quantized = weights.for_quantized_prompts();
        let mut points = Vec::new();
        for &prompt_len in &plan.prompt_lens {
            for &mode in &plan.modes {
                let runs: Vec<&RunSample> = samples
                    .iter()
                    .filter(|s| s.mode == mode && s.prompt_len == prompt_len)
                    .collect();
                if runs.is_empty() {
                    continue;
                }
                let mean = |f: fn(&RunSample) -> f64| {
                    runs.iter().map(|s| f(s)).sum::<f64>() / runs.len() as f64
                };
                let (prefill_ms, tpot_ms) = (mean(|s| s.prefill_ms), mean(|s| s.tpot_ms));
                let shape = RunShape {
                    prompt: prompt_len as u64,
                    generated: plan.gen_len as u64,
                    mode: mode.decode_mode(),
                    kv_dtype: plan.cache.dtype,
                    mla_path,
                };
                let w = if dense_prompt(prompt_len) {
                    &weights
                } else {
                    &quantized
                };
                let line =
                    RooflineLine::new(config, w, shape, prefill_ms, Some(tpot_ms), Some(&limits));
                points.push(RooflinePoint {
                    mode,
                    prompt_len,
                    generated: plan.gen_len,
                    prefill_ms,
                    tpot_ms,
                    line,
                });
            }
        }
        Ok(BenchRoofline {
            limits,
            measurements,
            weights,
            points,
        })
    }

    /// One row per point: prefill and decode work, time, achieved rate, % of the binding
    /// roof and intensity.
    pub fn table(&self) -> Table {
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        table.set_header([
            "prompt\n(tokens)",
            "mode",
            "prefill\nwork",
            "prefill\nGFLOP/s",
            "prefill\n% of roof",
            "prefill\nFLOP/byte",
            "decode work\nper token",
            "decode\nGB/s",
            "decode\n% of roof",
            "decode\nFLOP/byte",
        ]);
        for p in &self.points {
            let pre = &p.line.prefill;
            let mut row = vec![
                p.prompt_len.to_string(),
                p.mode.name().to_string(),
                flops_text(pre.flops),
                num(pre.gflop_s),
                binding_pct(pre),
                num(pre.flop_per_byte),
            ];
            match &p.line.decode {
                Some(d) => row.extend([
                    format!("{}, {}", bytes_text(d.bytes), flops_text(d.flops)),
                    num(d.gb_s),
                    binding_pct(d),
                    num(d.flop_per_byte),
                ]),
                None => row.extend([
                    "n/a".to_string(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]),
            }
            table.add_row(row);
        }
        for i in 2..10 {
            if let Some(col) = table.column_mut(i) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        table
    }

    /// The section as text: the limits, the table and how to read it.
    pub fn render_text(&self) -> String {
        let l = &self.limits;
        // What a phase above 100% of its roof means, once for the table.
        let any = |beyond: fn(&Phase) -> bool| {
            self.points
                .iter()
                .any(|p| beyond(&p.line.prefill) || p.line.decode.as_ref().is_some_and(beyond))
        };
        let mut above = String::new();
        for (beyond, note) in [
            (any(Phase::above_bandwidth), ABOVE_BANDWIDTH),
            (any(Phase::above_peak), ABOVE_PEAK),
        ] {
            if beyond {
                above = above + note + "\n";
            }
        }
        let cached = match l.working_set {
            Some(w) => format!(
                "% of cached: of the read bandwidth over a buffer the size of the decode weights ({}: {:.2} GB/s), which the CPU's caches may hold\n",
                bytes_text(w.bytes as f64),
                w.read_gb_s
            ),
            None => String::new(),
        };
        let moved = moved_notice(&self.measurements).map_or(String::new(), |m| m + "\n");
        let best_of = match self.measurements.len() {
            0 | 1 => String::new(),
            2 => " (each the better of 2 measurements, before and after the runs)".to_string(),
            n => format!(" (each the best of {n} measurements)"),
        };
        format!(
            "\nmachine limits{best_of}: {}\n{moved}roofline (means of the runs; prefill: whole prompt, logits of the last row; decode: per token, every weight + K/V read):\n{}\n% of roof: of the read bandwidth ({:.2} GB/s) when a phase is memory-bound (FLOP/byte below the ridge, {:.1}), of the f32 FMA peak ({:.1} GFLOP/s) when compute-bound\n{cached}{above}",
            l.describe(),
            self.table(),
            l.read_gb_s,
            l.ridge_flop_per_byte,
            l.f32_gflop_s,
        )
    }
}

/// `46.8%`, or `n/a`.
fn pct(v: Option<f64>) -> String {
    v.map_or("n/a".to_string(), |v| format!("{v:.1}%"))
}

/// The % of the roof that binds `p` ([`Phase::pct_of_roof`]) and which roof: `53.0% of
/// GB/s` (read bandwidth) or `46.8% of f32 peak`.
fn binding_pct(p: &Phase) -> String {
    let roof = match p.bound {
        Some(Bound::Compute) => "f32 peak",
        _ => "GB/s",
    };
    let cached = match (p.bound, p.pct_of_working_set_read) {
        (Some(Bound::Memory), Some(v)) => format!("\n{v:.1}% of cached"),
        _ => String::new(),
    };
    format!("{} of {roof}{cached}", pct(p.pct_of_roof()))
}
