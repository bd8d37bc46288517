//! The roofline: this machine's limits, measured, and where a run's prefill and decode sit
//! under them (Williams, Waterman and Patterson, "Roofline: an insightful visual performance
//! model for multicore architectures", CACM 2009).
//!
//! A phase doing F FLOPs over B bytes (arithmetic intensity I = F / B, FLOP/byte) cannot run
//! faster than `min(peak FLOP/s, bandwidth · I)`. Prefill multiplies whole prompts by each
//! weight (I in the tens to hundreds: compute-bound); a KV-cached decode step multiplies one
//! row by each weight (I of a few FLOP/byte on quantized weights: memory-bound). The point
//! where the two roofs meet, `peak / bandwidth`, is the ridge.
//!
//! - [`peak`]: measuring the limits (f32 FMA peak, int8 dot-product roof, read bandwidth);
//! - [`limits`]: what was measured ([`MachineLimits`]) and [`options`]: how long and large;
//! - [`repeat`]: limits measured more than once (the best of each figure, how far they moved);
//! - [`cpu_times`]: what other processes and steal time took while something was measured;
//! - [`handoff`]: core-to-core latency (a cache line's round trip between two threads);
//! - `loops`: the FMA and int8 loops the peaks time;
//! - [`bandwidth`]: the read bandwidth, from memory and over the decode weights' size;
//! - [`counts`]: FLOPs and bytes of a forward pass from the model's shapes;
//! - [`weights`]: the weight bytes each phase's kernels read, from the GGUF header;
//! - `si`: numbers with SI prefixes;
//! - [`mod@line`]: a run's achieved GFLOP/s, GB/s, intensity and % of the binding roof.
pub mod bandwidth;
pub mod counts;
pub mod cpu_times;
pub mod handoff;
pub mod limits;
pub mod line;
mod loops;
pub mod options;
pub mod peak;
pub mod repeat;
mod si;
pub mod weights;

pub use counts::{Bytes, Flops, WeightBytes};
pub use limits::MachineLimits;
pub use line::{Bound, Phase, RooflineLine, RunShape};
pub use options::MeasureOptions;
pub use peak::{measure, measure_with};
pub use weights::{model_weights, ModelWeights};
