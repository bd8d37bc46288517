//! [`BlockTable`]: one sequence's map from logical blocks to the pool's physical blocks, like an
//! OS page table (PagedAttention, Kwon et al., SOSP 2023, §4.1).
//!
//! Position `pos` lives in slot `pos % block_size` of physical block
//! `blocks[pos / block_size]`. The table grows a block at a time, only when a token needs
//! one, so at most the last block is partly empty.
//!
//! A hybrid model's pool has several layer groups ([`crate::kv::KvGroups`]); the table then
//! keeps one block list per group, all of the same logical length. A sliding-window group of
//! window W holds only the blocks that intersect the window of the sequence's next token:
//! after a commit at length `len`, a block whose positions all lie before `len + 1 − W`
//! goes back to the pool ([`BlockTable::drop_out_of_window`]) and its entry becomes
//! [`DROPPED`]. So between decode steps a sliding group holds at most `⌈W / B⌉ + 1` blocks,
//! and while a chunk of C tokens runs at most `⌈(W − 1 + C) / B⌉ + 1`.
//!
//! A full-attention group whose rows were evicted ([`crate::kv::evict`]) holds fewer rows
//! than positions: its survivors were packed into its first slots and `evicted(g)` rows
//! are gone, so position `pos ≥ len` of a new token lives at row `pos − evicted(g)`
//! ([`BlockTable::row_of`]); `len` still counts positions (RoPE, prompt or generated).
use crate::kv::KvPool;
use anyhow::Result;

use crate::kv::pool::DROPPED;

/// A sequence's block lists (one per layer group of the pool) and its committed length in
/// tokens.
///
/// Not `Clone`: two tables naming the same blocks would free them twice.
#[derive(Debug, Default)]
pub struct BlockTable {
    /// Per group, physical block ids in logical order ([`DROPPED`] for a block given back).
    groups: Vec<Vec<u32>>,
    len: usize,
    /// Per group, rows evicted so far (empty: none in any group).
    evicted: Vec<usize>,
}

impl BlockTable {
    /// An empty table (it takes the pool's groups at its first reservation).
    pub fn new() -> BlockTable {
        BlockTable::default()
    }

    /// Physical block ids of the first group, in logical order: every block of a plain
    /// (one-group) cache.
    pub fn blocks(&self) -> &[u32] {
        self.group(0)
    }

    /// Physical block ids of group `g` in logical order ([`DROPPED`] where a sliding group
    /// gave a block back); empty before the first reservation.
    pub fn group(&self, g: usize) -> &[u32] {
        self.groups.get(g).map_or(&[], Vec::as_slice)
    }

    /// Logical blocks of the first group (of every group while nothing was evicted):
    /// rows covered = this · block_size.
    pub fn num_logical_blocks(&self) -> usize {
        self.groups.first().map_or(0, Vec::len)
    }

    /// Rows group `g` evicted so far (0 for a group that never evicted).
    pub fn evicted(&self, g: usize) -> usize {
        self.evicted.get(g).copied().unwrap_or(0)
    }

    /// Whether any group evicted rows.
    pub fn has_evicted(&self) -> bool {
        self.evicted.iter().any(|&e| e > 0)
    }

    /// The row of group `g` where position `pos` (not evicted: `pos ≥ evicted(g)`) lives.
    pub fn row_of(&self, g: usize, pos: usize) -> usize {
        pos - self.evicted(g)
    }

    /// Rows group `g` holds of the committed tokens: `len − evicted(g)`.
    pub fn rows(&self, g: usize) -> usize {
        self.len - self.evicted(g)
    }

    /// Whether group `g`'s blocks cover positions up to `end` (rows up to
    /// `end − evicted(g)`).
    pub fn covers(&self, g: usize, end: usize, block_size: usize) -> bool {
        end.saturating_sub(self.evicted(g)) <= self.group(g).len() * block_size
    }

    /// Each group's block-list length (to undo a reservation with
    /// [`Self::truncate_lists`]).
    pub fn list_lens(&self) -> Vec<usize> {
        self.groups.iter().map(Vec::len).collect()
    }

    /// Give back every group's blocks past `lens[g]` (a snapshot of [`Self::list_lens`]):
    /// undoing a reservation whose forward pass failed.
    pub fn truncate_lists(&mut self, pool: &mut KvPool, lens: &[usize]) {
        self.truncate_to(pool, lens);
    }

    /// After group `g`'s kept rows were packed into its first `rows` slots
    /// ([`KvPool::compact_rows`]): forget the rest, giving back the blocks past them.
    /// Panics when `rows` is above the rows held (a caller bug).
    pub fn keep_rows(&mut self, pool: &mut KvPool, g: usize, rows: usize) {
        let held = self.rows(g);
        assert!(rows <= held, "keeping {rows} of {held} rows");
        if self.evicted.len() < self.groups.len() {
            self.evicted.resize(self.groups.len(), 0);
        }
        self.evicted[g] += held - rows;
        let keep = Self::blocks_for(rows, pool.block_size());
        while self.groups[g].len() > keep {
            if let Some(b) = self.groups[g].pop().filter(|&b| b != DROPPED) {
                pool.free(b);
            }
        }
    }

    /// Blocks held over every group (the dropped ones not counted).
    pub fn num_blocks(&self) -> usize {
        self.groups
            .iter()
            .map(|g| g.iter().filter(|&&b| b != DROPPED).count())
            .sum()
    }

    /// Blocks held by group `g`.
    pub fn num_blocks_in(&self, g: usize) -> usize {
        self.group(g).iter().filter(|&&b| b != DROPPED).count()
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

    /// The first logical block a group of window `window` must hold for a chunk starting
    /// at position `start` (its first row reads keys from `start + 1 − W` on).
    fn first_needed(window: Option<usize>, start: usize, block_size: usize) -> usize {
        window.map_or(0, |w| (start + 1).saturating_sub(w) / block_size)
    }

    /// Make the table cover `tokens` tokens in every group, taking blocks from `pool`
    /// (a sliding group only from the block its window starts in, for a chunk starting at
    /// the committed length); returns how many it took. Errors: the pool runs out; the
    /// blocks taken by this call go back first, so the table is as it was.
    pub fn reserve(&mut self, pool: &mut KvPool, tokens: usize) -> Result<usize> {
        let bs = pool.block_size();
        if self.groups.is_empty() {
            self.groups = vec![Vec::new(); pool.groups().groups.len()];
        }
        let before: Vec<usize> = self.groups.iter().map(Vec::len).collect();
        let mut taken = 0;
        for g in 0..self.groups.len() {
            let want = Self::blocks_for(tokens.saturating_sub(self.evicted(g)), bs);
            let window = pool.groups().groups[g].window;
            let first = Self::first_needed(window, self.len, bs);
            while self.groups[g].len() < want {
                if self.groups[g].len() < first {
                    self.groups[g].push(DROPPED);
                    continue;
                }
                match pool.allocate() {
                    Ok(b) => {
                        self.groups[g].push(b);
                        taken += 1;
                    }
                    Err(e) => {
                        self.truncate_to(pool, &before);
                        return Err(e);
                    }
                }
            }
        }
        Ok(taken)
    }

    /// Give back every group's blocks past the first `keep[g]`.
    fn truncate_to(&mut self, pool: &mut KvPool, keep: &[usize]) {
        for (list, &k) in self.groups.iter_mut().zip(keep) {
            while list.len() > k {
                if let Some(b) = list.pop().filter(|&b| b != DROPPED) {
                    pool.free(b);
                }
            }
        }
    }

    /// Give back every block past the first `keep` logical blocks to `pool` (undoing a
    /// [`Self::reserve`] whose forward pass failed). The committed length is clamped to
    /// what remains.
    pub fn truncate_blocks(&mut self, pool: &mut KvPool, keep: usize) {
        let keep = vec![keep; self.groups.len()];
        self.truncate_to(pool, &keep);
        let bs = pool.block_size();
        let covered = (0..self.groups.len())
            .map(|g| self.group(g).len() * bs + self.evicted(g))
            .min()
            .unwrap_or(0);
        self.len = self.len.min(covered);
    }

    /// Keep the first `len` tokens (no-op when `len ≥ self.len()`) and give the blocks past
    /// them back to `pool`: an undone decode step, a rolled-back draft. A group that
    /// evicted rows keeps at least the rows it holds before `len` (an eviction is never
    /// undone: truncating below it is a caller bug and keeps what the group holds).
    pub fn truncate(&mut self, pool: &mut KvPool, len: usize) {
        if len < self.len {
            let bs = pool.block_size();
            let keep: Vec<usize> = (0..self.groups.len())
                .map(|g| Self::blocks_for(len.saturating_sub(self.evicted(g)), bs))
                .collect();
            self.truncate_to(pool, &keep);
            self.commit(len, bs);
        }
    }

    /// Record that positions `0 .. len` hold K/V rows (after a successful forward pass).
    /// Panics when the table does not cover `len` tokens (a caller bug).
    pub fn commit(&mut self, len: usize, block_size: usize) {
        assert!(
            (0..self.groups.len().max(1)).all(|g| self.covers(g, len, block_size)),
            "commit past the table"
        );
        self.len = len;
    }

    /// Give back, in every sliding-window group, the blocks wholly before the window of the
    /// next token (position `len`): its keys start at `len + 1 − W`. Returns the blocks
    /// given back. A no-op for full-attention groups. Call it after [`Self::commit`] (and
    /// after filing prompt blocks in the prefix cache: a cached block given back stays
    /// cached, evictable).
    pub fn drop_out_of_window(&mut self, pool: &mut KvPool) -> usize {
        let bs = pool.block_size();
        let mut dropped = 0;
        for (g, list) in self.groups.iter_mut().enumerate() {
            let first = Self::first_needed(pool.groups().groups[g].window, self.len, bs);
            for entry in list.iter_mut().take(first) {
                if *entry != DROPPED {
                    pool.free(*entry);
                    *entry = DROPPED;
                    dropped += 1;
                }
            }
        }
        dropped
    }

    /// Append `block`, a prefix-cache hit that already holds this sequence's next
    /// `block_size` tokens (its reference taken by [`KvPool::share_cached`]), and count its
    /// tokens as computed. Panics when the table's last block is not full or the pool has
    /// several groups (a caller bug: only whole blocks are shared; see
    /// [`Self::push_cached_groups`]).
    pub fn push_cached(&mut self, block: u32, block_size: usize) {
        self.push_cached_groups(&[block], block_size);
    }

    /// [`Self::push_cached`] of one logical block in every group: `blocks[g]` is group `g`'s
    /// hit, or [`DROPPED`] for a sliding group whose window will not reach it.
    pub fn push_cached_groups(&mut self, blocks: &[u32], block_size: usize) {
        if self.groups.is_empty() {
            self.groups = vec![Vec::new(); blocks.len()];
        }
        assert_eq!(self.groups.len(), blocks.len(), "one block per group");
        assert!(!self.has_evicted(), "an evicted sequence shares no block");
        assert_eq!(
            self.len,
            self.num_logical_blocks() * block_size,
            "a shared block must follow a full block"
        );
        for (list, &b) in self.groups.iter_mut().zip(blocks) {
            list.push(b);
        }
        self.len += block_size;
    }

    /// Give every block back to `pool` and forget the tokens.
    pub fn release(&mut self, pool: &mut KvPool) {
        self.truncate_blocks(pool, 0);
        self.len = 0;
        self.evicted.clear();
    }

    /// Rows in the first group's last block (0 for an empty table): `rows − (blocks − 1) ·
    /// block_size`.
    pub fn last_block_fill(&self, block_size: usize) -> usize {
        match self.num_logical_blocks() {
            0 => 0,
            n => self.rows(0) - (n - 1) * block_size,
        }
    }
}

#[cfg(test)]
mod tests;
