//! [`BlockTable`]: one sequence's map from logical blocks to the pool's physical blocks, like an
//! OS page table (PagedAttention, Kwon et al., SOSP 2023, §4.1).
//!
//! Position `pos` lives in slot `pos % block_size` of physical block
//! `blocks[pos / block_size]`. The table grows a block at a time, only when a token needs
//! one, so at most the last block is partly empty.
use crate::kv::KvPool;
use anyhow::Result;

/// A sequence's block table and its committed length in tokens.
///
/// Not `Clone`: two tables naming the same blocks would free them twice.
#[derive(Debug, Default)]
pub struct BlockTable {
    blocks: Vec<u32>,
    len: usize,
}

impl BlockTable {
    /// An empty table.
    pub fn new() -> BlockTable {
        BlockTable::default()
    }

    /// Physical block ids, in logical order.
    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }

    /// Tokens committed (whose K/V rows a forward pass has written and finished).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no token is committed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Blocks needed for `tokens` tokens: `ceil(tokens / block_size)`.
    pub fn blocks_for(tokens: usize, block_size: usize) -> usize {
        tokens.div_ceil(block_size.max(1))
    }

    /// Make the table cover `tokens` tokens, taking blocks from `pool`; returns how many it
    /// took. Errors: the pool runs out; the blocks taken by this call go back first, so the
    /// table is as it was.
    pub fn reserve(&mut self, pool: &mut KvPool, tokens: usize) -> Result<usize> {
        let want = Self::blocks_for(tokens, pool.block_size());
        let before = self.blocks.len();
        while self.blocks.len() < want {
            match pool.allocate() {
                Ok(b) => self.blocks.push(b),
                Err(e) => {
                    self.truncate_blocks(pool, before);
                    return Err(e);
                }
            }
        }
        Ok(self.blocks.len() - before)
    }

    /// Give back every block past the first `keep` to `pool` (undoing a [`Self::reserve`]
    /// whose forward pass failed). The committed length is clamped to what remains.
    pub fn truncate_blocks(&mut self, pool: &mut KvPool, keep: usize) {
        while self.blocks.len() > keep {
            if let Some(b) = self.blocks.pop() {
                pool.free(b);
            }
        }
        self.len = self.len.min(self.blocks.len() * pool.block_size());
    }

    /// Record that positions `0 .. len` hold K/V rows (after a successful forward pass).
    /// Panics when the table does not cover `len` tokens (a caller bug).
    pub fn commit(&mut self, len: usize, block_size: usize) {
        assert!(
            len <= self.blocks.len() * block_size,
            "commit past the table"
        );
        self.len = len;
    }

    /// Append `block`, a prefix-cache hit that already holds this sequence's next
    /// `block_size` tokens (its reference taken by [`KvPool::share_cached`]), and count its
    /// tokens as computed. Panics when the table's last block is not full (a caller bug:
    /// only whole blocks are shared).
    pub fn push_cached(&mut self, block: u32, block_size: usize) {
        assert_eq!(
            self.len,
            self.blocks.len() * block_size,
            "a shared block must follow a full block"
        );
        self.blocks.push(block);
        self.len += block_size;
    }

    /// Give every block back to `pool` and forget the tokens.
    pub fn release(&mut self, pool: &mut KvPool) {
        self.truncate_blocks(pool, 0);
        self.len = 0;
    }

    /// Tokens in the last block (0 for an empty table): `len − (blocks − 1) · block_size`.
    pub fn last_block_fill(&self, block_size: usize) -> usize {
        if self.blocks.is_empty() {
            0
        } else {
            self.len - (self.blocks.len() - 1) * block_size
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{KvDtype, KvShape};

    fn pool(block_size: usize, max_blocks: usize) -> KvPool {
        let shape = KvShape {
            num_layers: 1,
            num_key_value_heads: 1,
            head_dim: 8,
            dtype: KvDtype::F16,
        };
        match KvPool::new(shape, block_size, max_blocks) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    /// k·block_size tokens need k blocks; one more token needs k + 1.
    #[test]
    fn block_edges() -> Result<()> {
        for bs in [1usize, 7, 16, 256] {
            let mut p = pool(bs, 1000);
            for k in 1..4 {
                let mut t = BlockTable::new();
                t.reserve(&mut p, k * bs)?;
                assert_eq!(t.blocks().len(), k, "bs {bs}");
                t.commit(k * bs, bs);
                assert_eq!(t.last_block_fill(bs), bs);
                t.reserve(&mut p, k * bs + 1)?;
                assert_eq!(t.blocks().len(), k + 1, "bs {bs}");
                t.commit(k * bs + 1, bs);
                assert_eq!(t.last_block_fill(bs), 1);
                t.release(&mut p);
                assert_eq!(p.num_used_blocks(), 0);
            }
        }
        Ok(())
    }

    /// A reservation the pool cannot satisfy takes nothing.
    #[test]
    fn failed_reserve_leaves_the_table_and_pool_as_they_were() -> Result<()> {
        let mut p = pool(4, 3);
        let mut t = BlockTable::new();
        t.reserve(&mut p, 5)?;
        t.commit(5, 4);
        assert!(t.reserve(&mut p, 13).is_err());
        assert_eq!((t.blocks().len(), t.len()), (2, 5));
        assert_eq!(p.num_used_blocks(), 2);
        t.release(&mut p);
        assert_eq!(p.num_free_blocks(), 3);
        Ok(())
    }
}
