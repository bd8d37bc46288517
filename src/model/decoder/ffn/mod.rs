//! A layer's feed-forward block: [`FeedForward`], one variant per kind, each kind in its own
//! file (`dense.rs`, `moe.rs` with its router in `router.rs`), and [`FfnKind`], the
//! architecture's choice.
use crate::model::decoder::pass::LayerPass;
use crate::model::linear::Linear;
use candle_core::Result;

pub mod dense;
pub mod moe;
pub mod router;

pub use dense::DenseFfn;
pub use moe::MoeFfn;

/// Which feed-forward block an architecture's layers run (`model::arch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnKind {
    /// A dense gated MLP ([`DenseFfn`]).
    Dense,
    /// A mixture of gated-MLP experts behind a router ([`MoeFfn`]).
    Moe,
}

/// A layer's feed-forward block and its weights.
// One per layer, built once at load: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum FeedForward {
    /// `down(act(gate(x)) · up(x))`, every row through every weight (SwiGLU, GeGLU).
    Dense(DenseFfn),
    /// `Σ_k w_k · expert_k(x)` over the experts the router picks for each row.
    Moe(MoeFfn),
}

impl FeedForward {
    /// The block on the normed rows `h`: `[Σ n, hidden_size]` → `[Σ n, hidden_size]`.
    pub fn forward(&self, pass: &LayerPass, h: &[f32]) -> Result<Vec<f32>> {
        match self {
            FeedForward::Dense(block) => block.forward(pass, h),
            FeedForward::Moe(block) => block.forward(pass, h),
        }
    }

    /// The block's weight matrices, in its own order.
    pub fn matrices(&self) -> Vec<&Linear> {
        match self {
            FeedForward::Dense(block) => block.matrices(),
            FeedForward::Moe(block) => block.matrices(),
        }
    }

    /// The dense block, if this is one (tests and tools reading its matrices by name).
    pub fn dense(&self) -> Option<&DenseFfn> {
        match self {
            FeedForward::Dense(block) => Some(block),
            FeedForward::Moe(_) => None,
        }
    }

    /// The mixture-of-experts block, if this is one.
    pub fn moe(&self) -> Option<&MoeFfn> {
        match self {
            FeedForward::Moe(block) => Some(block),
            FeedForward::Dense(_) => None,
        }
    }
}
