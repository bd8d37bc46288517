//! [`LayerKv`]: one layer of one sequence's KV cache as the attention kernel reads it, in place
//! in the block pool through the sequence's block table, and [`RowCursor`], the walk over one
//! KV head's rows in position order (one bounds check per group of keys, no division per row).
use crate::kv::part::KvPart;
use crate::kv::KvDtype;

/// One layer's K and V rows of one sequence, read in place through its block table.
#[derive(Debug)]
pub struct LayerKv<'a> {
    pub(crate) storage: &'a [u8],
    /// Byte offset of each logical block inside a region.
    pub(crate) blocks: Vec<usize>,
    pub(crate) k_offset: usize,
    pub(crate) v_offset: usize,
    pub(crate) head_stride: usize,
    pub(crate) block_size: usize,
    pub(crate) row_bytes: usize,
    /// Stored dtype of every row.
    pub dtype: KvDtype,
    /// Values per row.
    pub head_dim: usize,
    /// Values of each V row the output needs (`head_dim`; an MLA latent's `kv_lora_rank`:
    /// its RoPE part is a key only). The decode kernels may skip the value sums past it; the
    /// output's values there are then 0 and must not be read.
    pub value_dim: usize,
    /// Whether the attention kernels prefetch rows ahead of their reads (by hand: a block's
    /// rows are too short a run for the hardware prefetcher). On by default; off where the
    /// rows are already cached (a prompt's many query rows re-read the same keys).
    pub prefetch: bool,
    /// The layer's attention sinks, one logit per query head (`[heads]`, gpt-oss
    /// `attn_sinks`): each joins its head's softmax denominator once, when a row's key
    /// ranges are merged. Not KV data: it travels with the view because every attention
    /// kernel takes one. `None`: no sinks.
    pub sinks: Option<&'a [f32]>,
    /// Rows no query reads, per KV head (`true`: masked; rows past a head's list are read):
    /// the masking oracle of token eviction ([`crate::kv::evict`]) — attention over these
    /// rows runs an f64 reference instead of the kernels. `None`: every row is read.
    pub masked: Option<&'a [Vec<bool>]>,
}

impl<'a> LayerKv<'a> {
    /// A view of K and V rows held outside the pool, as f32: `storage` is
    /// `[2 (K, V)][heads][len][head_dim]` f32 values in native byte order, one block of `len`
    /// positions (MLA's expanded path: K and V rebuilt from the cached latents for a prompt).
    /// Panics when `storage` is not exactly that long (a caller bug).
    pub fn contiguous_f32(storage: &'a [u8], heads: usize, len: usize, head_dim: usize) -> Self {
        let row_bytes = 4 * head_dim;
        let head_stride = len * row_bytes;
        assert_eq!(
            storage.len(),
            2 * heads * head_stride,
            "K and V rows of every head"
        );
        LayerKv {
            storage,
            blocks: vec![0],
            k_offset: 0,
            v_offset: heads * head_stride,
            head_stride,
            block_size: len.max(1),
            row_bytes,
            dtype: KvDtype::F32,
            head_dim,
            value_dim: head_dim,
            prefetch: false,
            sinks: None,
            masked: None,
        }
    }

    /// This view with [`LayerKv::prefetch`] set to `on`.
    pub fn with_prefetch(self, on: bool) -> LayerKv<'a> {
        LayerKv {
            prefetch: on,
            ..self
        }
    }

    /// This view with the layer's attention sinks ([`LayerKv::sinks`]).
    pub fn with_sinks(self, sinks: Option<&'a [f32]>) -> LayerKv<'a> {
        LayerKv { sinks, ..self }
    }

    /// This view with the rows of [`LayerKv::masked`] left out.
    pub fn with_masked(self, masked: Option<&'a [Vec<bool>]>) -> LayerKv<'a> {
        LayerKv { masked, ..self }
    }

    /// Whether row `row` of KV head `head` is masked out.
    pub fn is_masked(&self, head: usize, row: usize) -> bool {
        self.masked
            .and_then(|m| m.get(head))
            .and_then(|h| h.get(row))
            .copied()
            .unwrap_or(false)
    }

    /// This view with [`LayerKv::value_dim`] set to `n` (at most `head_dim`).
    pub fn with_value_dim(self, n: usize) -> LayerKv<'a> {
        LayerKv {
            value_dim: n.min(self.head_dim),
            ..self
        }
    }

    /// The sinks of the `g` query heads that share KV head `kv_head` (heads
    /// `kv_head · g .. (kv_head + 1) · g`), when the layer has sinks.
    pub fn group_sinks(&self, kv_head: usize, g: usize) -> Option<&'a [f32]> {
        self.sinks
            .and_then(|s| s.get(kv_head * g..(kv_head + 1) * g))
    }

    /// The stored bytes of the `part` row of KV head `head` at position `pos`
    /// (`row_bytes` long). Panics when `pos` is past the table (a caller bug).
    #[inline]
    pub fn row(&self, part: KvPart, head: usize, pos: usize) -> &'a [u8] {
        let base = match part {
            KvPart::K => self.k_offset,
            KvPart::V => self.v_offset,
        };
        let at = base
            + head * self.head_stride
            + self.blocks[pos / self.block_size]
            + (pos % self.block_size) * self.row_bytes;
        &self.storage[at..at + self.row_bytes]
    }

    /// Positions the table covers (`blocks · block_size`).
    pub fn capacity(&self) -> usize {
        self.blocks.len() * self.block_size
    }

    /// Bytes of one stored row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// A cursor over the `part` rows of KV head `head` from position 0 on, in position order:
    /// the block-table walk without a division per row.
    pub fn rows(&self, part: KvPart, head: usize) -> RowCursor<'_, 'a> {
        let base = match part {
            KvPart::K => self.k_offset,
            KvPart::V => self.v_offset,
        } + head * self.head_stride;
        RowCursor {
            kv: self,
            base,
            block: 0,
            slot: 0,
        }
    }
}

/// Walks one KV head's K or V rows in position order through the block table.
#[derive(Debug)]
pub struct RowCursor<'v, 'a> {
    kv: &'v LayerKv<'a>,
    base: usize,
    block: usize,
    slot: usize,
}

impl<'a> RowCursor<'_, 'a> {
    /// The stored bytes of the next row (`row_bytes` long). Panics past the table (a caller
    /// bug: attention checks the length first).
    #[inline]
    pub fn next_row(&mut self) -> &'a [u8] {
        match self.try_next_row() {
            Some(row) => row,
            None => panic!("row cursor past the block table"),
        }
    }

    /// The next row, or `None` past the table (a prefetching cursor runs ahead of the reads).
    #[inline]
    pub fn try_next_row(&mut self) -> Option<&'a [u8]> {
        let at = self.base + self.kv.blocks.get(self.block)? + self.slot * self.kv.row_bytes;
        let row = self.kv.storage.get(at..at + self.kv.row_bytes)?;
        self.slot += 1;
        if self.slot == self.kv.block_size {
            self.slot = 0;
            self.block += 1;
        }
        Some(row)
    }

    /// Pointers to the next `keys` rows (`keys ≤ 8`, each `row_bytes` long) into `out`, and
    /// advance. Rows inside one block are found with one bounds check for the group, so the
    /// attention kernel pays the block-table walk once per eight keys, not per key. Returns
    /// false (and stops) past the table.
    #[inline]
    pub fn next_group(&mut self, keys: usize, out: &mut [*const u8; 8]) -> bool {
        let rb = self.kv.row_bytes;
        if self.slot + keys <= self.kv.block_size {
            let Some(&block) = self.kv.blocks.get(self.block) else {
                return false;
            };
            let at = self.base + block + self.slot * rb;
            let Some(run) = self.kv.storage.get(at..at + keys * rb) else {
                return false;
            };
            for (t, p) in out.iter_mut().enumerate().take(keys) {
                *p = run[t * rb..].as_ptr();
            }
            self.slot += keys;
            if self.slot == self.kv.block_size {
                self.slot = 0;
                self.block += 1;
            }
            return true;
        }
        for p in out.iter_mut().take(keys) {
            match self.try_next_row() {
                Some(row) => *p = row.as_ptr(),
                None => return false,
            }
        }
        true
    }

    /// Skip `n` rows.
    pub fn skip(&mut self, n: usize) {
        let pos = self.block * self.kv.block_size + self.slot + n;
        self.block = pos / self.kv.block_size;
        self.slot = pos % self.kv.block_size;
    }
}
