//! [`KvPool`]: the paged KV cache's block pool (PagedAttention, Kwon et al., SOSP 2023).
//!
//! K and V live in fixed-size blocks of `block_size` tokens, in one plain byte buffer (no
//! tensors). A block holds, for every layer, K and V head, the rows of its tokens, where a
//! row is one token's `head_dim` values of one KV head in the pool's dtype
//! ([`crate::kv::codec`]). So a block costs `block_size · bytes_per_token` bytes with
//! `bytes_per_token = 2 · L · H_kv · row_bytes`, the same arithmetic as `kv-size`
//! ([`crate::kv::KvShape::bytes_per_token`]).
//!
//! Hybrid models (some layers sliding-window, some full) group their layers
//! ([`crate::kv::KvGroups`]): a block then holds the rows of one group's `g` layers, and a
//! sequence's table has one block list per group. With one group (every plain model) a
//! block holds every layer, as before.
//!
//! Layout: `[g layers][2 (K, V)][num_key_value_heads][max_blocks][block_size][row_bytes]`,
//! like vLLM's per-layer cache tensors but head-major, so that one KV head's rows of
//! consecutive blocks sit next to each other: a sequence whose blocks were handed out in
//! order is read by the attention kernel as one stream per head, as a contiguous cache
//! would be. The buffer is an anonymous memory mapping for `max_blocks` blocks: the OS backs
//! its pages with memory only when a block is first written, so memory grows block by block.
//!
//! Blocks are allocated on demand: the pool hands out a never-used block the first time it
//! needs one ("materializes" it), keeps it when it is freed (a free list), and hands it out
//! again. A sequence maps its logical blocks to physical ones through a
//! [`crate::kv::BlockTable`]. Blocks are reference-counted: with automatic prefix caching
//! ([`crate::kv::prefix_cache`]) several block tables can name the same full prompt block;
//! a cached block whose count drops to 0 stays cached until the pool needs it (LRU).
use crate::kv::codec::{self, row_bytes};
use crate::kv::layer_view::LayerKv;
use crate::kv::part::KvPart;
use crate::kv::prefix_cache::{BlockKey, PrefixIndex};
use crate::kv::{KvDtype, KvGroups, KvShape};
use anyhow::{bail, Context, Result};
use memmap2::MmapMut;

mod compact;
mod offload_io;

/// Largest `--block-size` accepted (tokens); vLLM's CUDA kernels stop at 32, its CPU backend
/// and the range go to 256.
pub const MAX_BLOCK_SIZE: usize = 256;

/// The entry of a logical block a sliding-window group gave back (no K/V rows kept).
pub const DROPPED: u32 = u32::MAX;

/// vLLM's default `--block-size` (tokens).
pub const DEFAULT_BLOCK_SIZE: usize = 16;

/// The block pool: physical blocks, the free list, and the layout arithmetic.
///
/// Deliberately not `Clone`: a copy would either alias block storage or silently double the
/// memory; a second sequence gets a block table, not a second pool.
#[derive(Debug)]
pub struct KvPool {
    shape: KvShape,
    groups: KvGroups,
    block_size: usize,
    row_bytes: usize,
    storage: MmapMut,
    materialized: usize,
    free: Vec<u32>,
    /// Block tables naming each materialized block (0: free or evictable).
    refs: Vec<u32>,
    prefix: PrefixIndex,
    max_blocks: usize,
    /// The disk tier behind the prefix cache (`--kv-offload-dir`), if any.
    offload: Option<crate::kv::offload::OffloadTier>,
    /// A block's bytes on their way from the disk tier.
    scratch: Vec<u8>,
}

impl KvPool {
    /// An empty pool for a model of `shape` (its `dtype` is the stored KV dtype) with blocks of
    /// `block_size` tokens, that will materialize at most `max_blocks` blocks (address space
    /// for all of them is reserved now; memory is used as blocks are written).
    ///
    /// Errors: `block_size` outside 1..=[`MAX_BLOCK_SIZE`], `max_blocks` = 0, a dtype the
    /// runtime cannot store (fp8, int8, q4_0), a shape with no layer, head or head_dim, or an
    /// address-space reservation the OS refuses.
    pub fn new(shape: KvShape, block_size: usize, max_blocks: usize) -> Result<KvPool> {
        Self::with_groups(
            shape,
            KvGroups::single(shape.num_layers),
            block_size,
            max_blocks,
        )
    }

    /// [`KvPool::new`] for a model whose layers are grouped by `groups` (a hybrid KV cache):
    /// each block holds `groups.layers_per_block` layers' rows.
    ///
    /// Errors: as [`KvPool::new`], and groups that do not cover the shape's layers.
    pub fn with_groups(
        shape: KvShape,
        groups: KvGroups,
        block_size: usize,
        max_blocks: usize,
    ) -> Result<KvPool> {
        if groups.num_layers() != shape.num_layers {
            bail!(
                "KV groups cover {} layers, the shape {}",
                groups.num_layers(),
                shape.num_layers
            );
        }
        if !(1..=MAX_BLOCK_SIZE).contains(&block_size) {
            bail!("--block-size {block_size}: expected 1 to {MAX_BLOCK_SIZE} tokens");
        }
        if max_blocks == 0 {
            bail!("a KV pool needs room for at least one block");
        }
        if shape.num_layers == 0 || shape.num_key_value_heads == 0 || shape.head_dim == 0 {
            bail!("KV shape {shape:?} has no values to cache");
        }
        let row_bytes = row_bytes(shape.dtype, shape.head_dim)?;
        let bytes = (shape.parts() * groups.layers_per_block * shape.num_key_value_heads)
            .checked_mul(max_blocks)
            .and_then(|x| x.checked_mul(block_size * row_bytes))
            .filter(|&b| b <= isize::MAX as usize)
            .with_context(|| format!("a KV pool of {max_blocks} blocks does not fit in memory"))?;
        let storage = MmapMut::map_anon(bytes.max(1)).with_context(|| {
            format!("cannot reserve {bytes} bytes of address space for the KV pool")
        })?;
        Ok(KvPool {
            shape,
            groups,
            block_size,
            row_bytes,
            storage,
            materialized: 0,
            free: Vec::new(),
            refs: Vec::new(),
            prefix: PrefixIndex::default(),
            max_blocks,
            offload: None,
            scratch: Vec::new(),
        })
    }

    /// The cache's shape (layers, KV heads, head_dim, stored dtype).
    pub fn shape(&self) -> KvShape {
        self.shape
    }

    /// The layer groups (one group of every layer unless the model is hybrid).
    pub fn groups(&self) -> &KvGroups {
        &self.groups
    }

    /// The stored KV dtype.
    pub fn dtype(&self) -> KvDtype {
        self.shape.dtype
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Bytes of one stored row (one token, one KV head, `head_dim` values).
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Bytes one token takes in every layer, K and V: `2 · L · H_kv · row_bytes` (what a
    /// full cache holds per token; a hybrid cache's sliding groups hold fewer tokens), or
    /// `L · row_bytes` for a latent (MLA) cache.
    pub fn bytes_per_token(&self) -> usize {
        self.shape.parts() * self.shape.num_layers * self.shape.num_key_value_heads * self.row_bytes
    }

    /// Bytes of one block: `block_size · 2 · g · H_kv · row_bytes` for the `g` layers of a
    /// group (`block_size · bytes_per_token` with one group).
    pub fn block_bytes(&self) -> usize {
        self.block_size
            * self.shape.parts()
            * self.groups.layers_per_block
            * self.shape.num_key_value_heads
            * self.row_bytes
    }

    /// Blocks materialized so far (in use or on the free list).
    pub fn num_blocks(&self) -> usize {
        self.materialized
    }

    /// Blocks that can still be handed out: the free list, those not yet materialized, and
    /// the cached blocks no sequence uses (evicted on demand).
    pub fn num_free_blocks(&self) -> usize {
        self.free.len() + (self.max_blocks - self.materialized) + self.prefix.num_evictable()
    }

    /// Blocks in use by some block table (reference count > 0).
    pub fn num_used_blocks(&self) -> usize {
        self.materialized - self.free.len() - self.prefix.num_evictable()
    }

    /// Cached prefix blocks no sequence uses (reference count 0, kept until evicted).
    pub fn num_cached_free_blocks(&self) -> usize {
        self.prefix.num_evictable()
    }

    /// Block tables naming `block` (0 when free, evictable or never materialized).
    pub fn ref_count(&self, block: u32) -> u32 {
        self.refs.get(block as usize).copied().unwrap_or(0)
    }

    /// The most blocks this pool will materialize.
    pub fn max_blocks(&self) -> usize {
        self.max_blocks
    }

    /// Bytes of the blocks the pool has materialized (handed out at least once): the memory
    /// its writes have claimed, `materialized · block bytes`.
    pub fn bytes_allocated(&self) -> u64 {
        (self.materialized * self.block_bytes()) as u64
    }

    /// Take a block (reference count 1): from the free list, else a newly materialized one
    /// (zeroed), else the least recently used cached block no sequence uses (evicted from
    /// the prefix cache).
    ///
    /// Errors: every one of the `max_blocks` blocks is in use.
    pub fn allocate(&mut self) -> Result<u32> {
        let id = if let Some(id) = self.free.pop() {
            id
        } else if self.materialized < self.max_blocks {
            self.materialized += 1;
            self.refs.push(0);
            (self.materialized - 1) as u32
        } else if let Some(id) = self.prefix.evict() {
            id
        } else {
            bail!(
                "the KV pool is full: all {} blocks of {} tokens are in use",
                self.max_blocks,
                self.block_size
            );
        };
        self.refs[id as usize] = 1;
        Ok(id)
    }

    /// Drop one reference to `block`; at 0 it goes back to the free list, or, when the
    /// prefix cache holds it, becomes evictable (kept until the pool needs it). A block that
    /// is not in use is a caller bug; it is ignored (debug builds assert) rather than
    /// corrupting the free list.
    pub fn free(&mut self, block: u32) {
        let refs = self.refs.get_mut(block as usize);
        let valid = matches!(refs, Some(ref r) if **r > 0);
        debug_assert!(valid, "freeing block {block}, which is not in use");
        let Some(r) = refs.filter(|r| **r > 0) else {
            return;
        };
        *r -= 1;
        if *r == 0 {
            if self.prefix.contains(block) {
                self.prefix.release(block);
            } else {
                self.free.push(block);
            }
        }
    }

    /// A prefix-cache hit: the cached block holding `key`, with one more reference (taken
    /// out of the evictable LRU if no sequence used it). None on a miss.
    pub fn share_cached(&mut self, key: &BlockKey) -> Option<u32> {
        let block = self.prefix.find(key)?;
        let r = &mut self.refs[block as usize];
        if *r == 0 {
            self.prefix.reuse(block);
        }
        *r += 1;
        Some(block)
    }

    /// Whether the prefix cache holds exactly `key` (no reference taken).
    pub fn is_cached(&self, key: &BlockKey) -> bool {
        self.prefix.find(key).is_some()
    }

    /// File the in-use `block`, whose slots now hold the K/V rows of `key`'s tokens, in the
    /// prefix cache. Returns false when `key` is already cached (in another block) or the
    /// block already has a key; nothing changes then.
    pub fn cache_block(&mut self, block: u32, key: BlockKey) -> bool {
        if self.ref_count(block) == 0 {
            return false;
        }
        if self.offload.is_none() {
            return self.prefix.insert(block, key);
        }
        let filed = self.prefix.insert(block, key.clone());
        if filed {
            self.write_through(block, &key);
        }
        filed
    }

    /// Blocks in the prefix cache (in use or evictable).
    pub fn num_cached_blocks(&self) -> usize {
        self.prefix.len()
    }

    /// Cached blocks evicted so far (taken back from the prefix cache for another use).
    pub fn evictions(&self) -> u64 {
        self.prefix.evictions()
    }

    /// Whether `block` is in the prefix cache (in use or evictable), and its layer group there.
    pub fn cached_group(&self, block: u32) -> Option<u32> {
        self.prefix.key_of(block).map(|k| k.group)
    }

    /// Entries of the pool's largest bookkeeping list or map (free list, reference counts,
    /// the prefix index's maps): at most [`Self::max_blocks`] whatever was served.
    pub fn largest_index(&self) -> usize {
        self.free
            .len()
            .max(self.refs.len())
            .max(self.prefix.largest_map())
    }

    /// Bytes of one (layer, K/V, head) region: `max_blocks · block_size · row_bytes`.
    fn region_bytes(&self) -> usize {
        self.max_blocks * self.block_size * self.row_bytes
    }

    /// Byte offset of the region of (`layer`, `part`, KV head `head`); `layer` is a slot of
    /// a block (`0 .. layers_per_block`). A latent cache's V is its K rows (the latent).
    fn region(&self, layer: usize, part: KvPart, head: usize) -> usize {
        let h = self.shape.num_key_value_heads;
        let parts = self.shape.parts();
        let part = (part as usize).min(parts - 1);
        ((layer * parts + part) * h + head) * self.region_bytes()
    }

    /// The parts a block stores per layer: K and V, or K alone for a latent cache.
    pub(crate) fn stored_parts(&self) -> &'static [KvPart] {
        match self.shape.latent {
            true => &[KvPart::K],
            false => &[KvPart::K, KvPart::V],
        }
    }

    /// Encode `rows` (`[num_key_value_heads, n, head_dim]` f32, head-major) into the slots of
    /// positions `start_pos .. start_pos + n` of block slot `layer`'s `part` (the model
    /// layer itself with one group; see [`KvGroups::slot`]), through `table` (physical
    /// block of each logical block of the layer's group). Panics only when `table` does not
    /// cover the positions (a caller bug: the block table grows before the forward pass).
    pub fn write(
        &mut self,
        table: &[u32],
        layer: usize,
        part: KvPart,
        start_pos: usize,
        n: usize,
        rows: &[f32],
    ) {
        let (d, bs, rb) = (self.shape.head_dim, self.block_size, self.row_bytes);
        for head in 0..self.shape.num_key_value_heads {
            let region = self.region(layer, part, head);
            for i in 0..n {
                let pos = start_pos + i;
                let block = table[pos / bs] as usize;
                let at = region + (block * bs + pos % bs) * rb;
                let src = &rows[(head * n + i) * d..][..d];
                codec::encode_row(self.shape.dtype, src, &mut self.storage[at..at + rb]);
            }
        }
    }

    /// A read-only view of block slot `layer` (see [`KvPool::write`]) through `table`, for
    /// the attention kernel. A block a sliding group dropped ([`DROPPED`])
    /// maps to the end of the storage: reading it panics, it never aliases another block.
    pub fn layer_view<'a>(&'a self, table: &[u32], layer: usize) -> LayerKv<'a> {
        let block_bytes = self.block_size * self.row_bytes;
        LayerKv {
            storage: &self.storage,
            blocks: table
                .iter()
                .map(|&b| match b {
                    DROPPED => self.storage.len(),
                    b => b as usize * block_bytes,
                })
                .collect(),
            k_offset: self.region(layer, KvPart::K, 0),
            v_offset: self.region(layer, KvPart::V, 0),
            head_stride: self.region_bytes(),
            block_size: self.block_size,
            row_bytes: self.row_bytes,
            dtype: self.shape.dtype,
            head_dim: self.shape.head_dim,
            value_dim: self.shape.head_dim,
            sinks: None,
            prefetch: true,
            masked: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(dtype: KvDtype) -> KvShape {
        KvShape {
            num_layers: 2,
            num_key_value_heads: 3,
            head_dim: 64,
            dtype,
            latent: false,
        }
    }

    #[test]
    fn block_bytes_follow_the_kv_size_arithmetic() -> Result<()> {
        for dtype in codec::RUNTIME_DTYPES {
            let pool = KvPool::new(shape(dtype), 7, 4)?;
            let s = shape(dtype);
            assert_eq!(pool.bytes_per_token() as u64, s.bytes_per_token());
            assert_eq!(pool.block_bytes() as u64, 7 * s.bytes_per_token());
        }
        Ok(())
    }

    #[test]
    fn allocates_on_demand_reuses_freed_blocks_and_stops_at_the_limit() -> Result<()> {
        let mut pool = KvPool::new(shape(KvDtype::F16), 16, 2)?;
        assert_eq!((pool.num_blocks(), pool.bytes_allocated()), (0, 0));
        let a = pool.allocate()?;
        let b = pool.allocate()?;
        assert_ne!(a, b);
        assert_eq!(pool.bytes_allocated(), 2 * pool.block_bytes() as u64);
        let err = pool.allocate().unwrap_err().to_string();
        assert!(err.contains("KV pool is full"), "{err}");
        pool.free(a);
        assert_eq!(pool.num_free_blocks(), 1);
        assert_eq!(pool.allocate()?, a);
        assert_eq!(pool.num_blocks(), 2);
        Ok(())
    }

    #[test]
    fn bad_block_sizes_and_dtypes_are_refused() {
        for bs in [0, 257] {
            let e = KvPool::new(shape(KvDtype::F32), bs, 1)
                .unwrap_err()
                .to_string();
            assert!(e.contains("--block-size") && e.contains("1 to 256"), "{e}");
        }
        assert!(KvPool::new(shape(KvDtype::Fp8), 16, 1).is_err());
        assert!(KvPool::new(shape(KvDtype::F32), 256, 1).is_ok());
        assert!(KvPool::new(shape(KvDtype::F32), 1, 1).is_ok());
    }

    /// Rows written through a block table read back from the slots the table names.
    #[test]
    fn rows_land_in_their_slot() -> Result<()> {
        let mut pool = KvPool::new(shape(KvDtype::F32), 3, 8)?;
        let table = vec![pool.allocate()?, pool.allocate()?, pool.allocate()?];
        let (h, d, n) = (3, 64, 7);
        let rows: Vec<f32> = (0..h * n * d).map(|i| i as f32).collect();
        pool.write(&table, 1, KvPart::V, 1, n, &rows);
        let view = pool.layer_view(&table, 1);
        for head in 0..h {
            for i in 0..n {
                let mut got = vec![0f32; d];
                codec::decode_row(KvDtype::F32, view.row(KvPart::V, head, 1 + i), &mut got);
                assert_eq!(got, rows[(head * n + i) * d..][..d]);
            }
        }
        // Layer 0 and the K half are untouched.
        assert!(pool
            .layer_view(&table, 0)
            .row(KvPart::V, 0, 1)
            .iter()
            .all(|&b| b == 0));
        assert!(view.row(KvPart::K, 2, 5).iter().all(|&b| b == 0));
        Ok(())
    }
}
