//! [`DraftSide`]: the engine's draft model and its KV pool, carved from the same budget as
//! the target's.
use super::config::EngineConfig;
use crate::kv::KvPool;
use crate::model::Decoder;
use anyhow::Result;

/// The draft model and its pool (one full-attention group: a sliding-window draft keeps
/// every row, as `--swa-full` does, so cutting it back never meets a dropped block).
pub(super) struct DraftSide<'m> {
    pub(super) decoder: &'m Decoder,
    pub(super) pool: KvPool,
}

impl<'m> DraftSide<'m> {
    /// The draft's pool, and `config.num_blocks` lowered so that the target's blocks and as
    /// many of the draft's fit the bytes the target's alone had.
    ///
    /// Errors: a KV shape or block size the pool refuses.
    pub(super) fn carve(
        target: &Decoder,
        draft: &'m Decoder,
        config: &mut EngineConfig,
    ) -> Result<DraftSide<'m>> {
        let bs = config.cache.block_size;
        let target_shape = target.config().kv_shape(config.cache.dtype);
        let target_groups = target.config().kv_groups(config.cache.swa_full);
        let target_block = target_shape.bytes_per_token_per_layer() as u128
            * target_groups.layers_per_block as u128
            * bs as u128;
        let shape = draft.config().kv_shape(config.cache.dtype);
        let groups = draft.config().kv_groups(true);
        let draft_block = shape.bytes_per_token_per_layer() as u128
            * groups.layers_per_block as u128
            * bs as u128
            * groups.groups.len().max(1) as u128;
        let budget = config.num_blocks as u128 * target_block;
        let blocks = budget / (target_block + draft_block).max(1);
        config.num_blocks = usize::try_from(blocks).unwrap_or(usize::MAX).max(1);
        let draft_blocks = config.num_blocks * groups.groups.len().max(1);
        Ok(DraftSide {
            decoder: draft,
            pool: KvPool::with_groups(shape, groups, bs, draft_blocks)?,
        })
    }
}
