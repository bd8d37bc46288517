//! [`Report`]: everything one `nanollm bench` measured (the `--json` document), and its
//! rendering as a table for the terminal.
use crate::bench::chart::{render_terminal, step_series, StepSeries};
use crate::bench::machine::Machine;
use crate::bench::plan::BenchMode;
use crate::bench::plan::BenchPlan;
use crate::bench::roofline::BenchRoofline;
use crate::bench::run::RunSample;
use crate::bench::summary::{speedups, summarize, Speedup, Stat, Summary};
use crate::bench::tokens::{check_identical_tokens, TokenCheck, TokenRun};
use crate::units::num;
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use serde::Serialize;

/// The settings a benchmark ran with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    /// The model file.
    pub model: String,
    /// Modes, prompt lengths (tokens), generated tokens, runs and warm-up runs.
    #[serde(flatten)]
    pub plan: BenchPlan,
    /// The mode speedups are relative to.
    pub baseline: BenchMode,
    /// CPU threads.
    pub threads: usize,
    /// Prefill kernels (`dense` or `quantized`).
    pub prefill_kernel: String,
    /// MLA's path (`auto`, `expanded`, `absorbed`), for a model with multi-head latent
    /// attention; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mla_path: Option<String>,
    /// Always `greedy` (argmax): the modes must produce the same tokens.
    pub sampling: String,
    /// Always true: end-of-sequence tokens do not end a run, so every run generates
    /// `gen_len` tokens.
    pub ignore_eos: bool,
    /// The text prompts are cut from.
    pub prompt_text: String,
    /// Tokens in that text with this model's tokenizer (the longest possible prompt).
    pub prompt_text_tokens: usize,
    /// Wall time of loading the model (reading and repacking the weights), ms.
    pub load_ms: f64,
}

/// The whole benchmark report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// What ran.
    pub settings: Settings,
    /// Where it ran.
    pub machine: Machine,
    /// Every measured run, in the order run.
    pub runs: Vec<RunSample>,
    /// Mean ± std and min per (mode, prompt length), from `runs`.
    pub summaries: Vec<Summary>,
    /// Each mode against the baseline per prompt length, from `summaries`.
    pub speedups: Vec<Speedup>,
    /// Whether every mode generated the same tokens for each prompt, from `runs`.
    pub token_check: TokenCheck,
    /// Decode step latency against position per (mode, prompt length), from `runs`.
    pub step_latency: Vec<StepSeries>,
    /// The machine's measured limits and each (mode, prompt length)'s prefill and decode
    /// figures under them, from `summaries`' runs; null when not measured.
    pub roofline: Option<BenchRoofline>,
}

impl Report {
    /// Aggregate `runs` into a report: summaries, speedups, token check and step series all
    /// come from these samples.
    pub fn new(settings: Settings, machine: Machine, runs: Vec<RunSample>) -> Report {
        let (modes, lens) = (&settings.plan.modes, &settings.plan.prompt_lens);
        let summaries = summarize(&runs, modes, lens);
        let speedups = speedups(&summaries, settings.baseline);
        let token_runs: Vec<TokenRun> = runs.iter().map(TokenRun::from).collect();
        let token_check = check_identical_tokens(&token_runs, settings.baseline);
        let step_latency = step_series(&runs, modes, lens);
        Report {
            settings,
            machine,
            runs,
            summaries,
            speedups,
            token_check,
            step_latency,
            roofline: None,
        }
    }

    /// The results table: per prompt length, one row per metric, one column per mode
    /// (mean ± std, min) and one per speedup over the baseline.
    pub fn table(&self) -> Table {
        let modes = &self.settings.plan.modes;
        let baseline = self.settings.baseline;
        let others: Vec<BenchMode> = modes.iter().copied().filter(|&m| m != baseline).collect();
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        let mut header = vec!["prompt\n(tokens)".to_string(), "metric".to_string()];
        header.extend(
            modes
                .iter()
                .map(|m| format!("{}\nmean ± std (min)", m.name())),
        );
        header.extend(
            others
                .iter()
                .map(|m| format!("speedup\n{} vs {}", m.name(), baseline.name())),
        );
        table.set_header(header);
        type Metric = (
            &'static str,
            fn(&Summary) -> Stat,
            Option<fn(&Speedup) -> f64>,
        );
        let metrics: [Metric; 7] = [
            ("TTFT (ms)", |s| s.ttft_ms, None),
            ("TPOT (ms)", |s| s.tpot_ms, Some(|x| x.tpot)),
            ("ITL p50 (ms)", |s| s.itl_p50_ms, None),
            ("ITL p99 (ms)", |s| s.itl_p99_ms, None),
            ("E2EL (ms)", |s| s.e2el_ms, Some(|x| x.e2el)),
            (
                "decode (tokens/s)",
                |s| s.decode_tokens_per_s,
                Some(|x| x.decode_tokens_per_s),
            ),
            ("prefill (tokens/s)", |s| s.prefill_tokens_per_s, None),
        ];
        for &len in &self.settings.plan.prompt_lens {
            for (i, (name, stat, speedup)) in metrics.iter().enumerate() {
                let mut row = vec![
                    if i == 0 {
                        len.to_string()
                    } else {
                        String::new()
                    },
                    name.to_string(),
                ];
                for &mode in modes {
                    let cell = self
                        .summaries
                        .iter()
                        .find(|s| s.mode == mode && s.prompt_len == len)
                        .map_or("n/a".to_string(), |s| stat_cell(&stat(s)));
                    row.push(cell);
                }
                for &mode in &others {
                    let cell = match (
                        speedup,
                        self.speedups
                            .iter()
                            .find(|x| x.mode == mode && x.prompt_len == len),
                    ) {
                        (Some(f), Some(x)) => format!("{:.2}×", f(x)),
                        _ => String::new(),
                    };
                    row.push(cell);
                }
                table.add_row(row);
            }
        }
        for i in 2..2 + modes.len() + others.len() {
            if let Some(col) = table.column_mut(i) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        table
    }

    /// What `nanollm bench` prints on stdout: a settings line, the machine, the table, the
    /// identical-tokens verdict and the step-latency chart (`chart_width` columns).
    pub fn render_text(&self, chart_width: usize) -> String {
        let s = &self.settings;
        let file = std::path::Path::new(&s.model)
            .file_name()
            .map_or(s.model.clone(), |f| f.to_string_lossy().into_owned());
        let mla = s
            .mla_path
            .as_ref()
            .map_or(String::new(), |p| format!(" · MLA path {p}"));
        let mut out = format!(
            "nanollm bench · {file} · greedy, EOS ignored · {} generated tokens · {} run(s) + {} warm-up per mode and prompt · prefill kernel {}{mla} · KV cache {} in blocks of {} tokens\n",
            s.plan.gen_len, s.plan.runs, s.plan.warmup, s.prefill_kernel, s.plan.cache.dtype.name(), s.plan.cache.block_size
        );
        out.push_str(&format!("machine: {}\n", self.machine.describe()));
        out.push_str(&format!("{}\n", self.table()));
        out.push_str(&format!("{}\n", self.token_check.describe()));
        if !self.speedups.is_empty() {
            out.push_str(&format!(
                "speedups: TPOT and E2EL = mean {b} / mean mode; decode tokens/s = mean mode / mean {b}\n",
                b = s.baseline.name()
            ));
        }
        if let Some(r) = &self.roofline {
            out.push_str(&r.render_text());
        }
        let chart = render_terminal(&self.step_latency, chart_width);
        if !chart.is_empty() {
            out.push('\n');
            out.push_str(&chart);
        }
        out
    }
}

/// `mean ± std (min x)`; the mean alone for one run (its spread is unknown, not 0).
fn stat_cell(s: &Stat) -> String {
    match s.n {
        1 => num(s.mean),
        _ => format!("{} ± {} ({})", num(s.mean), num(s.std), num(s.min)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_useful_digits() {
        assert_eq!(stat_cell(&Stat::of(&[10.0, 12.0])), "11.00 ± 1.41 (10.00)");
    }
}
