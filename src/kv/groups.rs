//! [`KvGroups`]: a hybrid KV cache's layer groups (vLLM V1's KV cache groups, "hybrid KV
//! cache manager"). Layers are grouped by attention type — full causal attention, or a
//! sliding window of W tokens — into groups of the same size `g`: the gcd of the type
//! counts, so no group is padded (Gemma 3 270M: 3 global and 15 sliding layers, g = 3, one
//! full group and five sliding groups). A pool block holds `g` layers' rows of
//! `block_size` tokens, whichever group it serves, and each sequence keeps one block list
//! per group ([`crate::kv::BlockTable`]): a full group holds every token's block, a
//! sliding group only the blocks that still intersect the window of the sequence's next
//! token. A model with one attention type is one group of all its layers: the plain paged
//! cache, byte for byte.

/// One group: its layers (model indices, ascending) and what they attend to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvGroup {
    /// Model layer indices, `g` of them.
    pub layers: Vec<usize>,
    /// The sliding window in tokens; `None`: full attention (every block kept).
    pub window: Option<usize>,
}

/// The groups of a model's layers and where each layer's rows sit in a pool block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvGroups {
    /// Layers per group (and per pool block), `g`.
    pub layers_per_block: usize,
    /// The groups: full-attention groups first, then sliding ones by window, each by layer
    /// order.
    pub groups: Vec<KvGroup>,
    /// Per model layer: (its group, its slot `0 .. g` inside the group's blocks).
    slots: Vec<(usize, usize)>,
}

impl KvGroups {
    /// One full-attention group of every layer (the plain paged cache).
    pub fn single(num_layers: usize) -> KvGroups {
        Self::of(&vec![None; num_layers])
    }

    /// The groups of layers whose windows are `layer_windows` (per layer; `None`: full
    /// attention). Layers of one type are split, in order, into groups of `g` = the gcd of
    /// the types' layer counts.
    pub fn of(layer_windows: &[Option<usize>]) -> KvGroups {
        let mut kinds: Vec<Option<usize>> = layer_windows.to_vec();
        kinds.sort_unstable();
        kinds.dedup();
        let members: Vec<Vec<usize>> = kinds
            .iter()
            .map(|k| {
                (0..layer_windows.len())
                    .filter(|&i| layer_windows[i] == *k)
                    .collect()
            })
            .collect();
        let g = members.iter().map(Vec::len).fold(0, gcd).max(1);
        let mut groups = Vec::new();
        let mut slots = vec![(0, 0); layer_windows.len()];
        for (kind, layers) in kinds.iter().zip(&members) {
            for chunk in layers.chunks(g) {
                for (j, &l) in chunk.iter().enumerate() {
                    slots[l] = (groups.len(), j);
                }
                groups.push(KvGroup {
                    layers: chunk.to_vec(),
                    window: *kind,
                });
            }
        }
        KvGroups {
            layers_per_block: g,
            groups,
            slots,
        }
    }

    /// Model layers covered.
    pub fn num_layers(&self) -> usize {
        self.slots.len()
    }

    /// Layer `layer`'s group and slot. Panics past the last layer (a caller bug).
    pub fn slot(&self, layer: usize) -> (usize, usize) {
        self.slots[layer]
    }

    /// Whether some group slides (blocks leave it as the sequence grows).
    pub fn has_sliding(&self) -> bool {
        self.groups.iter().any(|g| g.window.is_some())
    }

    /// The most blocks one sequence holds at once when it runs chunks of at most `chunk`
    /// tokens and ends at `tokens` tokens, over every group: a full group `⌈tokens / B⌉`, a
    /// sliding one at most `⌈(W − 1 + C) / B⌉ + 1` (the window behind the chunk's first row
    /// and the chunk, on block edges), never more than the full count.
    pub fn max_blocks_for(&self, tokens: usize, chunk: usize, block_size: usize) -> usize {
        self.max_blocks_holding(tokens, tokens, chunk, block_size)
    }

    /// [`Self::max_blocks_for`] when the full groups hold at most `rows` of the `tokens`
    /// (token eviction, [`crate::kv::evict`]); sliding groups as before.
    pub fn max_blocks_holding(
        &self,
        tokens: usize,
        rows: usize,
        chunk: usize,
        block_size: usize,
    ) -> usize {
        let bs = block_size.max(1);
        let full = rows.min(tokens).div_ceil(bs);
        self.groups
            .iter()
            .map(|g| match g.window {
                None => full,
                Some(w) => full.min((w - 1 + chunk.max(1)).div_ceil(bs) + 1),
            })
            .sum()
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma3_270m_is_one_full_group_and_five_sliding_groups_of_three() {
        let windows: Vec<Option<usize>> = (0..18).map(|i| (i % 6 < 5).then_some(512)).collect();
        let g = KvGroups::of(&windows);
        assert_eq!(g.layers_per_block, 3);
        assert_eq!(g.groups.len(), 6);
        assert_eq!(
            g.groups[0],
            KvGroup {
                layers: vec![5, 11, 17],
                window: None
            }
        );
        assert_eq!(
            g.groups[1],
            KvGroup {
                layers: vec![0, 1, 2],
                window: Some(512)
            }
        );
        assert_eq!(g.slot(11), (0, 1));
        assert_eq!(g.slot(4), (2, 1));
        assert!(g.has_sliding());
        // Gemma 3 1B: 26 layers, 4 global: g = gcd(4, 22) = 2.
        let windows: Vec<Option<usize>> = (0..26).map(|i| (i % 6 < 5).then_some(512)).collect();
        assert_eq!(KvGroups::of(&windows).layers_per_block, 2);
    }

    #[test]
    fn one_attention_type_is_one_group_of_every_layer() {
        let g = KvGroups::single(30);
        assert_eq!((g.layers_per_block, g.groups.len()), (30, 1));
        assert!(!g.has_sliding());
        let m = KvGroups::of(&[Some(4096); 32]);
        assert_eq!((m.layers_per_block, m.groups.len()), (32, 1));
        assert_eq!(
            m.max_blocks_for(100_000, 512, 16),
            (4095 + 512usize).div_ceil(16) + 1
        );
    }
}
