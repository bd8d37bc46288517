//! `nanollm bench`: run several decode modes on the same prompts and compare their latency.
//!
//! One concept per file:
//! - [`text`]: the public-domain text prompts are cut from (exactly N tokens each);
//! - [`plan`]: what to run (modes, prompt lengths, generated tokens, runs, warm-up) and its checks;
//! - [`run`]: one greedy generation per (mode, prompt length, run), recorded as a [`RunSample`];
//! - [`summary`]: mean ± std and min per mode and prompt length, and the speedups;
//! - [`tokens`]: the identical-tokens check across modes;
//! - [`machine`]: CPU model, threads, crate versions;
//! - [`report`]: the whole report (the `--json` document) and its table;
//! - [`chart`]: decode step latency against position, as a terminal chart;
//! - [`svg`]: the same chart as an SVG file (`--plot`);
//! - [`serving`]: the batched engine under load: `--concurrency`, `--scenario`;
//! - [`roofline`]: the machine's measured limits and each run's roofline figures;
//! - [`roofline_svg`]: the roofline chart, stacked under the step chart in `--plot`.
pub mod chart;
pub mod http;
pub mod kv_quality;
pub mod machine;
pub mod plan;
pub mod report;
pub mod roofline;
pub mod roofline_svg;
pub mod run;
pub mod serving;
pub mod spec_synth;
pub mod summary;
pub mod svg;
pub mod text;
pub mod tokens;

pub use plan::{BenchPlan, Scenario};
pub use report::{Report, Settings};
pub use run::{RunSample, StepSample};
pub use summary::{Speedup, Stat, Summary};
pub use tokens::{check_identical_tokens, Mismatch, TokenCheck, TokenRun};
