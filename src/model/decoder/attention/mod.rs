//! A layer's attention block: [`Attention`], one variant per kind of attention, each kind in
//! its own file (`gqa.rs`), and [`AttentionKind`], the architecture's choice. The KV cache is
//! the engine's: a block writes its layer's new K/V rows into the pool and attends through
//! each sequence's block table (the paged kernels are `model::paged_attention`).
use crate::kv::KvPool;
use crate::model::batch::SeqChunk;
use crate::model::decoder::pass::LayerPass;
use crate::model::linear::Linear;
use candle_core::Result;

pub mod gqa;
pub mod mla;

pub use gqa::Gqa;
pub use mla::{split_kv_b, Mla, MlaPath, MlaQuery};

/// Which attention block an architecture's layers run (`model::arch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKind {
    /// Grouped-query attention with RoPE ([`Gqa`]).
    Gqa,
    /// Multi-head latent attention ([`Mla`]).
    Mla,
}

/// A layer's attention block and its weights.
#[derive(Debug, Clone)]
pub enum Attention {
    /// Grouped-query attention (Llama, Mistral, Qwen2/3, Gemma 3).
    Gqa(Gqa),
    /// Multi-head latent attention (DeepSeek-V2/V3).
    Mla(Mla),
}

impl Attention {
    /// Causal self-attention for the rows of every sequence, `h`: `[Σ n, hidden_size]` →
    /// `[Σ n, hidden_size]`, writing each row's K and V into its slot of `pool`.
    pub fn forward(
        &self,
        pass: &LayerPass,
        h: &[f32],
        pool: &mut KvPool,
        seqs: &[SeqChunk],
    ) -> Result<Vec<f32>> {
        match self {
            Attention::Gqa(block) => block.forward(pass, h, pool, seqs),
            Attention::Mla(block) => block.forward(pass, h, pool, seqs),
        }
    }

    /// The block's weight matrices, in its own order.
    pub fn matrices(&self) -> Vec<&Linear> {
        match self {
            Attention::Gqa(block) => block.matrices(),
            Attention::Mla(block) => block.matrices(),
        }
    }

    /// The block's f32 vectors (norm weights; biases belong to their matrices).
    pub fn vectors(&self) -> Vec<&[f32]> {
        match self {
            Attention::Gqa(block) => block.vectors(),
            Attention::Mla(block) => block.vectors(),
        }
    }

    /// The GQA block, if this is one (tests and tools reading its matrices by name).
    pub fn gqa(&self) -> Option<&Gqa> {
        match self {
            Attention::Gqa(block) => Some(block),
            Attention::Mla(_) => None,
        }
    }

    /// The MLA block, if this is one.
    pub fn mla(&self) -> Option<&Mla> {
        match self {
            Attention::Mla(block) => Some(block),
            Attention::Gqa(_) => None,
        }
    }
}
