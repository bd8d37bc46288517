//! [`KvCache`]: one sequence's paged KV cache, a [`KvPool`] and the sequence's [`BlockTable`].
//!
//! The decoder writes each new token's K and V rows straight into their slot (block, offset)
//! and its attention reads them back through the table, in the stored dtype. The length is
//! committed only after a forward pass succeeds: a failed pass leaves the cache as it was.
use crate::kv::{BlockTable, KvGroups, KvPool, KvShape};
use anyhow::Result;

/// The KV cache of one request: a block pool and the request's block table.
#[derive(Debug)]
pub struct KvCache {
    /// The physical blocks.
    pub pool: KvPool,
    /// This request's logical → physical block map and its committed length.
    pub table: BlockTable,
}

impl KvCache {
    /// An empty cache for a model of `shape` (its `dtype` is the stored dtype), with blocks of
    /// `block_size` tokens taken on demand, for up to `max_tokens` tokens (the context
    /// window, say: address space is reserved for it, memory is used block by block).
    ///
    /// Errors: as [`KvPool::new`] (block size outside 1..=256, a dtype the runtime cannot
    /// store, a reservation the OS refuses).
    pub fn new(shape: KvShape, block_size: usize, max_tokens: usize) -> Result<KvCache> {
        let groups = KvGroups::single(shape.num_layers);
        Self::with_groups(shape, groups, block_size, max_tokens)
    }

    /// [`KvCache::new`] for a model whose layers the cache groups by `groups` (a hybrid
    /// cache: sliding-window groups give blocks back as they leave the window).
    ///
    /// Errors: as [`KvPool::with_groups`].
    pub fn with_groups(
        shape: KvShape,
        groups: KvGroups,
        block_size: usize,
        max_tokens: usize,
    ) -> Result<KvCache> {
        let per_group = max_tokens.div_ceil(block_size.max(1)).max(1);
        let max_blocks = per_group.saturating_mul(groups.groups.len().max(1));
        Ok(KvCache {
            pool: KvPool::with_groups(shape, groups, block_size, max_blocks)?,
            table: BlockTable::new(),
        })
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True when no token is held.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The cache's shape (layers, KV heads, head_dim, stored dtype).
    pub fn shape(&self) -> KvShape {
        self.pool.shape()
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.pool.block_size()
    }

    /// Blocks this sequence holds.
    pub fn blocks_used(&self) -> usize {
        self.table.num_blocks()
    }

    /// Tokens in the last block.
    pub fn last_block_fill(&self) -> usize {
        self.table.last_block_fill(self.pool.block_size())
    }

    /// Keep the first `len` tokens (no-op when `len ≥ self.len()`) and give the blocks past
    /// them back to the pool: a decode step can be undone, a prompt re-scored.
    pub fn truncate(&mut self, len: usize) {
        self.table.truncate(&mut self.pool, len);
    }

    /// The end of a speculative verify step: keep the first `len` tokens (as
    /// [`Self::truncate`]), then give back the sliding groups' blocks wholly before the
    /// window of the next token, which the verify pass kept
    /// ([`crate::model::Decoder::forward_verify`]).
    pub fn rollback(&mut self, len: usize) {
        self.truncate(len);
        self.table.drop_out_of_window(&mut self.pool);
    }

    /// Drop every token and give the blocks back to the pool (naive decode does this before
    /// each full recompute).
    pub fn clear(&mut self) {
        self.table.release(&mut self.pool);
    }

    /// Bytes of K and V rows for the tokens held: `len · bytes_per_token` of the pool's layout
    /// (`2 · L · H_kv · row_bytes`).
    pub fn bytes_used(&self) -> u64 {
        self.len() as u64 * self.pool.bytes_per_token() as u64
    }

    /// Bytes of the blocks this sequence holds (`blocks · block bytes`): the used bytes plus
    /// the empty slots of the last block.
    pub fn bytes_held(&self) -> u64 {
        (self.blocks_used() * self.pool.block_bytes()) as u64
    }

    /// Bytes the pool's buffers allocate (every block it ever materialized).
    pub fn bytes_allocated(&self) -> u64 {
        self.pool.bytes_allocated()
    }
}
