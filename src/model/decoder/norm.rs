//! The RMSNorms of a decoder layer and where they sit: [`Norms`] (before each block, and
//! on each block's output when the architecture sandwiches them) and [`NormKind`], the
//! architecture's choice.
use crate::model::ops;

/// Where a layer's RMSNorms sit around its attention and feed-forward blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// Before each block only: `x += Block(RMSNorm(x))` (Llama).
    Pre,
    /// Before each block and on its output: `x += RMSNorm(Block(RMSNorm(x)))` (Gemma 2/3).
    Sandwich,
}

/// One layer's RMSNorm weights, each `[hidden_size]`.
#[derive(Debug, Clone)]
pub struct Norms {
    /// Before attention (HF `input_layernorm`, GGUF `attn_norm`).
    pub attn_in: Vec<f32>,
    /// Before the feed-forward block (HF Llama `post_attention_layernorm`, Gemma
    /// `pre_feedforward_layernorm`; GGUF `ffn_norm`).
    pub ffn_in: Vec<f32>,
    /// On the attention output before its residual add ([`NormKind::Sandwich`]: Gemma's
    /// `post_attention_layernorm`; GGUF `post_attention_norm`).
    pub attn_out: Option<Vec<f32>>,
    /// On the feed-forward output before its residual add ([`NormKind::Sandwich`]: Gemma's
    /// `post_feedforward_layernorm`; GGUF `post_ffw_norm`).
    pub ffn_out: Option<Vec<f32>>,
}

impl Norms {
    /// A block's output `y` (`[n, hidden_size]`) through its output norm `w` when the layer
    /// has one, else unchanged.
    pub fn output(w: Option<&[f32]>, y: Vec<f32>, eps: f32) -> Vec<f32> {
        match w {
            Some(w) => ops::rms_norm(&y, w, eps),
            None => y,
        }
    }
}
