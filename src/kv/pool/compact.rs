//! Moving rows inside a sequence's blocks: the compaction of an eviction
//! ([`crate::kv::evict`]), which packs the rows a policy keeps into the first slots of the
//! table so the blocks past them can go back to the pool.
use super::KvPool;

impl KvPool {
    /// Copy, for block slot `layer`'s every stored part and KV head `head`, row `kept[i]`
    /// to row `i` through `table` (one group's physical blocks), for every `i` in order.
    /// `kept` must be ascending with `kept[i] ≥ i` (what a selection of rows is), so no row
    /// is overwritten before it is read. The stored bytes move as they are (any dtype, a
    /// rotated one included: rows are per token, design rule R3), so a kept key keeps its
    /// RoPE phase.
    ///
    /// Panics when a row lies past `table` or a block is shared (a caller bug: an evicting
    /// sequence never takes prefix-cache blocks).
    pub fn compact_rows(&mut self, table: &[u32], layer: usize, head: usize, kept: &[usize]) {
        let (bs, rb) = (self.block_size, self.row_bytes);
        for &part in self.stored_parts() {
            let region = self.region(layer, part, head);
            let at = |row: usize| {
                let block = table[row / bs];
                region + (block as usize * bs + row % bs) * rb
            };
            for (i, &from) in kept.iter().enumerate() {
                debug_assert!(from >= i, "rows kept must ascend");
                if from == i {
                    continue;
                }
                debug_assert!(
                    self.refs[table[i / bs] as usize] == 1,
                    "compacting into a shared block"
                );
                let (src, dst) = (at(from), at(i));
                self.storage.copy_within(src..src + rb, dst);
            }
        }
    }
}
