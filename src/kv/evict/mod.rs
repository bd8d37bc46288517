//! Token eviction: a policy ([`EvictConfig`]) chooses which token rows of a sequence's
//! cache stay, per layer and KV head, and the survivors are packed into the first slots of
//! the sequence's blocks so the blocks past them go back to the pool: the memory is really
//! freed, as `KV held`, the pool's free blocks and the live page show.
//!
//! - **Where**: full-attention groups only ([`crate::kv::KvGroups`]): a sliding-window
//!   group already holds only its window. Every layer and KV head of a group keeps the same
//!   number of rows (the budget), so one block list serves them all; which rows differs.
//! - **Positions**: a kept key keeps its RoPE phase (rows move as stored bytes); a new token
//!   is still rotated at its position, and written at row `position − evicted`
//!   ([`crate::kv::BlockTable::row_of`]). Rows stay in position order, so attention's one
//!   softmax over keys in order (design rule R4) holds over the survivors.
//! - **When** ([`EvictState`]): at the end of the prompt and then every `every` generated
//!   tokens, at fixed positions, so a recompute after preemption replays the same
//!   evictions (the scheduler never runs a chunk across one).
//! - **Sharing**: an evicting sequence neither takes nor publishes prefix-cache blocks (its
//!   blocks are rewritten in place), so nothing compressed is ever found under an
//!   uncompressed prefix hash, in the pool or on the disk tier.
pub mod policy;
pub mod score;
pub mod select;
pub mod state;

pub use policy::{Budget, EvictConfig, EvictPolicy};
pub use state::{EvictState, LoggedQuery, QueryLog};

use crate::kv::{BlockTable, KvPool, LayerKv};

/// One eviction of one layer's KV head: which of its rows stayed (ascending, as indices
/// into the rows held before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptRows {
    /// Model layer.
    pub layer: usize,
    /// KV head.
    pub head: usize,
    /// Rows kept.
    pub rows: Vec<usize>,
}

/// Evict down to `budget` rows in every full-attention group of `table` that holds more:
/// `score(layer, head, view, rows)` scores each row held (see [`score`]); the first `sinks`
/// and last `protect` rows always stay ([`select::kept_rows`]). The survivors are packed
/// ([`KvPool::compact_rows`]) and the blocks past them given back. Returns what stayed per
/// layer and head (empty when nothing was evicted).
pub fn evict(
    pool: &mut KvPool,
    table: &mut BlockTable,
    budget: usize,
    (sinks, protect): (usize, usize),
    mut score: impl FnMut(usize, usize, &LayerKv, usize) -> Vec<f64>,
) -> Vec<KeptRows> {
    let groups = pool.groups().clone();
    let heads = pool.shape().num_key_value_heads;
    let mut all = Vec::new();
    for (g, group) in groups.groups.iter().enumerate() {
        let rows = table.rows(g);
        if group.window.is_some() || rows <= budget {
            continue;
        }
        let mut kept = Vec::new();
        for (slot, &layer) in group.layers.iter().enumerate() {
            let view = pool.layer_view(table.group(g), slot);
            for head in 0..heads {
                let s = score(layer, head, &view, rows);
                kept.push((
                    slot,
                    select::kept_rows(&s, budget, sinks, protect),
                    layer,
                    head,
                ));
            }
        }
        let list = table.group(g).to_vec();
        for (slot, rows_kept, _, head) in &kept {
            pool.compact_rows(&list, *slot, *head, rows_kept);
        }
        table.keep_rows(pool, g, budget);
        all.extend(
            kept.into_iter()
                .map(|(_, rows, layer, head)| KeptRows { layer, head, rows }),
        );
    }
    all
}

#[cfg(test)]
mod tests;
