//! The `kv-size` arithmetic: what each [`LayerKind`] holds in bytes, and an [`Estimate`] for a
//! model at a context length, batch, dtype, tensor-parallel degree and block size.
//!
//! Plain attention (MHA/GQA/MQA, and sliding-window layers) goes through
//! [`KvShape`](crate::kv::KvShape), the same arithmetic the runtime cache
//! ([`crate::kv::KvCache`]) allocates with, so the estimate for a plain model equals what the
//! engine really holds. Every sum is checked: an overflow is an error (`None`), never a wrapped
//! number.
//!
//! Submodules: `bytes` (per-layer and per-model byte arithmetic), `query` (the [`Estimate`] for
//! one [`Query`]) and `fit` (how many sequences fit in a GPU's free memory).
mod bytes;
mod fit;
mod query;

pub use bytes::{heads_per_gpu, state_dtype};
pub use fit::{fit, free_per_gpu, Fit};
pub use query::{estimate, Estimate, GroupEstimate, Query};

use crate::sizing::spec::{KvSpec, LayerKind};
use anyhow::{bail, Result};

/// How the cache is laid out across GPUs and pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Tensor-parallel degree: KV heads are split across `tp` GPUs (replicated when
    /// `tp > num_key_value_heads`, as vLLM does); an MLA latent is replicated on every GPU.
    pub tp: u64,
    /// Paged allocation: every sequence's tokens round up to whole blocks of this many tokens
    /// (vLLM `--block-size`); `None` means a contiguous cache of exactly `T` tokens.
    pub block_size: Option<u64>,
}

impl Layout {
    /// One GPU, a contiguous cache: what `nanollm generate` allocates.
    pub const SINGLE: Layout = Layout {
        tp: 1,
        block_size: None,
    };
}

impl Default for Layout {
    fn default() -> Self {
        Layout::SINGLE
    }
}

/// Check that `tp` splits the heads the way vLLM requires: `num_attention_heads` divisible by
/// `tp`, and K/V heads divisible by `tp` or `tp` divisible by them (then replicated).
/// Errors: a degree that does not divide; names both numbers.
pub fn check_tp(spec: &KvSpec, tp: u64) -> Result<()> {
    if tp == 0 {
        bail!("tensor-parallel degree 0: expected at least 1");
    }
    if let Some(heads) = spec.num_attention_heads {
        if heads % tp != 0 {
            bail!("tensor-parallel degree {tp} does not divide num_attention_heads {heads}");
        }
    }
    for g in &spec.groups {
        if let LayerKind::FullAttention {
            num_key_value_heads: kv,
            ..
        }
        | LayerKind::SlidingWindow {
            num_key_value_heads: kv,
            ..
        } = g.kind
        {
            let kv = kv as u64;
            if !kv.is_multiple_of(tp) && !tp.is_multiple_of(kv) {
                bail!("tensor-parallel degree {tp} and num_key_value_heads {kv}: neither divides the other");
            }
        }
    }
    Ok(())
}
