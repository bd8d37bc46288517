//! [`DraftSide`]: the engine's draft model and its KV pool, carved from the same budget as
//! the target's.
use super::config::EngineConfig;
use crate::engine::spec::Acceptance;
use crate::engine::CacheConfig;
use crate::kv::KvPool;
use crate::model::{Decoder, ModelConfig};
use crate::units::human_bytes;
use anyhow::{bail, Result};

/// The draft model and its pool (one full-attention group: a sliding-window draft keeps
/// every row, as `--swa-full` does, so cutting it back never meets a dropped block).
pub(super) struct DraftSide<'m> {
    pub(super) decoder: &'m Decoder,
    pub(super) pool: KvPool,
    /// The engine's recent verify steps with this draft, across sequences: where a fresh
    /// sequence's turn-down rule starts ([`Acceptance::seed_from`]).
    pub(super) record: Acceptance,
}

/// Bytes of one block of the target's pool and of the draft's (`cache`'s dtype and block
/// size; the draft keeps every layer's rows), and the target's layer groups: a target whose
/// layers are split into `g` groups (Gemma 3's sliding and full layers) holds `g` of its
/// blocks for each block of tokens, the draft one of its own, so a draft block is paired
/// with `g` target blocks, not one (which gave a Gemma 3 draft 86% of the budget).
fn block_bytes(
    target: &ModelConfig,
    draft: &ModelConfig,
    cache: &CacheConfig,
) -> (u128, u128, u128) {
    let bs = cache.block_size as u128;
    let target_groups = target.kv_groups(cache.swa_full);
    let t = target.kv_shape(cache.dtype).bytes_per_token_per_layer() as u128
        * target_groups.layers_per_block as u128
        * bs;
    let groups = draft.kv_groups(true);
    let d = draft.kv_shape(cache.dtype).bytes_per_token_per_layer() as u128
        * groups.layers_per_block as u128
        * bs
        * groups.groups.len().max(1) as u128;
    (t, d, target_groups.groups.len().max(1) as u128)
}

/// The `num_blocks` (in the target's block bytes) that leaves the target `target_blocks`
/// once [`LlmEngine::with_draft`](super::LlmEngine::with_draft) has paired each with a draft block: how a default KV budget,
/// sized for the target's sequences, grows to hold the draft's too.
pub fn blocks_with_draft(
    target: &ModelConfig,
    draft: &ModelConfig,
    cache: &CacheConfig,
    target_blocks: usize,
) -> usize {
    let (t, d, g) = block_bytes(target, draft, cache);
    // Whole pairs (`g` target blocks and a draft block), so the carve gives back at least
    // `target_blocks` however they divide by `g`.
    let pairs = (target_blocks as u128).div_ceil(g);
    let total = (pairs * (t * g + d)).div_ceil(t.max(1));
    usize::try_from(total).unwrap_or(usize::MAX)
}

impl<'m> DraftSide<'m> {
    /// The draft's pool, and `config.num_blocks` lowered so that the target's blocks and the
    /// draft's (one per target block of each layer group) fit the bytes the target's alone
    /// had.
    ///
    /// Errors: a budget too small for one block of each; a KV shape or block size the pool
    /// refuses.
    pub(super) fn carve(
        target: &Decoder,
        draft: &'m Decoder,
        config: &mut EngineConfig,
    ) -> Result<DraftSide<'m>> {
        let bs = config.cache.block_size;
        let (target_block, draft_block, g) =
            block_bytes(target.config(), draft.config(), &config.cache);
        let budget = config.num_blocks as u128 * target_block;
        // `g` target blocks beside each draft block.
        let pairs = budget / (g * target_block + draft_block).max(1);
        let blocks = pairs * g;
        if blocks == 0 {
            bail!(
                "the KV budget ({}) holds no block of the model's ({}) beside one of the draft model's ({}): raise --kv-mem",
                human_bytes(u64::try_from(budget).unwrap_or(u64::MAX)),
                human_bytes(u64::try_from(target_block).unwrap_or(u64::MAX)),
                human_bytes(u64::try_from(draft_block).unwrap_or(u64::MAX))
            );
        }
        config.num_blocks = usize::try_from(blocks).unwrap_or(usize::MAX);
        let groups = draft.config().kv_groups(true);
        let shape = draft.config().kv_shape(config.cache.dtype);
        let draft_blocks =
            usize::try_from(pairs).unwrap_or(usize::MAX) * groups.groups.len().max(1);
        Ok(DraftSide {
            decoder: draft,
            pool: KvPool::with_groups(shape, groups, bs, draft_blocks)?,
            record: Acceptance::default(),
        })
    }
}
