//! Causal attention over the paged KV cache on AVX2 + FMA and AVX-512 (`model::paged_attention`
//! holds the entry point and the portable path):
//!
//! - [`avx2`]: one decode row's scores, softmax and values over one KV head's keys, the
//!   256-key ranges (R4) and the values pass's wide registers;
//! - [`avx512`]: the same per-lane arithmetic on twice the lanes;
//! - [`values`]: the values pass `Σ p_j · V_j` over a key range, shared by both;
//! - [`exp`]: the kernels' own exp, for the scores and the merge;
//! - [`merge`]: how a row's key ranges are combined in position order, and [`sink`]: a
//!   head's sink logit joining the denominator after it;
//! - [`prefill_tile`]: a tile of consecutive prompt rows, each key row read once for the tile.
pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod exp;
pub(crate) mod merge;
pub(crate) mod prefill_tile;
pub mod sink;
pub(crate) mod values;
