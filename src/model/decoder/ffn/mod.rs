//! A layer's feed-forward block: [`FeedForward`], one variant per kind, each kind in its own
//! file (`dense.rs`), and [`FfnKind`], the architecture's choice.
use crate::model::decoder::pass::LayerPass;
use crate::model::linear::Linear;
use candle_core::Result;

pub mod dense;

pub use dense::DenseFfn;

/// Which feed-forward block an architecture's layers run (`model::arch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnKind {
    /// A dense gated MLP ([`DenseFfn`]).
    Dense,
}

/// A layer's feed-forward block and its weights.
#[derive(Debug, Clone)]
pub enum FeedForward {
    /// `down(act(gate(x)) · up(x))`, every row through every weight (SwiGLU, GeGLU).
    Dense(DenseFfn),
}

impl FeedForward {
    /// The block on the normed rows `h`: `[Σ n, hidden_size]` → `[Σ n, hidden_size]`.
    pub fn forward(&self, pass: &LayerPass, h: &[f32]) -> Result<Vec<f32>> {
        match self {
            FeedForward::Dense(block) => block.forward(pass, h),
        }
    }

    /// The block's weight matrices, in its own order.
    pub fn matrices(&self) -> Vec<&Linear> {
        match self {
            FeedForward::Dense(block) => block.matrices(),
        }
    }

    /// The dense block, if this is one (tests and tools reading its matrices by name).
    pub fn dense(&self) -> Option<&DenseFfn> {
        match self {
            FeedForward::Dense(block) => Some(block),
        }
    }
}
