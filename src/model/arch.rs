//! Each architecture as a small description of the blocks its decoder is built from
//! ([`Blocks`], one row per [`Architecture`] in [`Blocks::of`]): the loaders read it to
//! know which block weights to build, the config readers for the switches it implies. A new
//! attention or feed-forward kind is its block's file (`decoder/attention/`,
//! `decoder/ffn/`) and a change to an architecture's row here.
use crate::model::config::Architecture;
use crate::model::decoder::attention::AttentionKind;
use crate::model::decoder::ffn::FfnKind;
use crate::model::decoder::norm::NormKind;

/// What an architecture's decoder layers are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocks {
    /// The attention block of every layer.
    pub attention: AttentionKind,
    /// The feed-forward block of every layer.
    pub ffn: FfnKind,
    /// Where the RMSNorms sit around the two blocks.
    pub norms: NormKind,
    /// RMSNorm over each head of Q and K before RoPE (`q_norm`, `k_norm`).
    pub qk_norm: bool,
    /// Token embeddings multiplied by √hidden_size before the first layer.
    pub scale_embeddings: bool,
}

/// Llama's blocks: GQA, a dense gated MLP, pre-norms.
const LLAMA: Blocks = Blocks {
    attention: AttentionKind::Gqa,
    ffn: FfnKind::Dense,
    norms: NormKind::Pre,
    qk_norm: false,
    scale_embeddings: false,
};

impl Blocks {
    /// The blocks of `arch`. (QKV bias, the activation, windows and RoPE bases are read
    /// from the model's files: they vary within one architecture.)
    pub const fn of(arch: Architecture) -> Blocks {
        match arch {
            Architecture::Llama | Architecture::Mistral | Architecture::Qwen2 => LLAMA,
            Architecture::Qwen3 => Blocks {
                qk_norm: true,
                ..LLAMA
            },
            Architecture::Mixtral => Blocks {
                ffn: FfnKind::Moe,
                ..LLAMA
            },
            Architecture::Qwen3Moe => Blocks {
                ffn: FfnKind::Moe,
                qk_norm: true,
                ..LLAMA
            },
            // The FFN's pre-norm is GGUF `post_attention_norm` (the loader's name for it).
            Architecture::GptOss => Blocks {
                ffn: FfnKind::Moe,
                ..LLAMA
            },
            // The first `first_k_dense_replace` layers' FFN is dense (`MoeConfig`).
            Architecture::DeepSeek2 => Blocks {
                attention: AttentionKind::Mla,
                ffn: FfnKind::Moe,
                ..LLAMA
            },
            Architecture::Gemma3 => Blocks {
                norms: NormKind::Sandwich,
                qk_norm: true,
                scale_embeddings: true,
                ..LLAMA
            },
        }
    }
}
