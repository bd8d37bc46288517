//! The pool's side of the disk tier ([`crate::kv::offload`]): a block's bytes out of and
//! into the pool's head-major layout, and the tier behind the prefix cache.
use super::KvPool;
use crate::kv::offload::OffloadTier;
use crate::kv::BlockKey;
use anyhow::Result;

impl KvPool {
    /// Put `tier` behind the prefix cache: blocks filed from now on are written through to
    /// it, and [`Self::load_offloaded`] reads from it.
    pub fn set_offload(&mut self, tier: OffloadTier) {
        self.offload = Some(tier);
    }

    /// The disk tier, when one is set.
    pub fn offload(&self) -> Option<&OffloadTier> {
        self.offload.as_ref()
    }

    /// Take the disk tier out (to flush or drop it).
    pub fn take_offload(&mut self) -> Option<OffloadTier> {
        self.offload.take()
    }

    /// Block `block`'s bytes in the tier's order: for each layer slot of the block, K then
    /// V, each KV head, the `block_size` rows of the block ([`Self::block_bytes`] in all).
    pub fn block_bytes_out(&self, block: u32) -> Vec<u8> {
        let run = self.block_size * self.row_bytes;
        let mut out = Vec::with_capacity(self.block_bytes());
        for layer in 0..self.groups.layers_per_block {
            for &part in self.stored_parts() {
                for head in 0..self.shape.num_key_value_heads {
                    let at = self.region(layer, part, head) + block as usize * run;
                    out.extend_from_slice(&self.storage[at..at + run]);
                }
            }
        }
        out
    }

    /// Store `bytes` (as [`Self::block_bytes_out`] gives them) into `block`. Panics on a
    /// length other than [`Self::block_bytes`] (a caller bug).
    pub fn block_bytes_in(&mut self, block: u32, bytes: &[u8]) {
        assert_eq!(bytes.len(), self.block_bytes(), "a whole block's bytes");
        let run = self.block_size * self.row_bytes;
        let mut src = bytes.chunks_exact(run);
        for layer in 0..self.groups.layers_per_block {
            for &part in self.stored_parts() {
                for head in 0..self.shape.num_key_value_heads {
                    let at = self.region(layer, part, head) + block as usize * run;
                    if let Some(s) = src.next() {
                        self.storage[at..at + run].copy_from_slice(s);
                    }
                }
            }
        }
    }

    /// Whether the disk tier holds exactly `key`.
    pub fn is_offloaded(&self, key: &BlockKey) -> bool {
        self.offload.as_ref().is_some_and(|t| t.contains(key))
    }

    /// Let the disk tier see files other processes wrote (see [`OffloadTier::refresh`]).
    pub fn refresh_offload(&mut self) {
        if let Some(t) = &mut self.offload {
            t.refresh();
        }
    }

    /// A disk-tier hit: a pool block (reference count 1) holding `key`'s bytes read back
    /// from disk, filed in the prefix cache. `Ok(None)` when the tier does not have it or
    /// its read failed (the tier forgets it, and removes its file when the bytes were bad:
    /// that file's other blocks the prefix cache holds are written again).
    ///
    /// Errors: no pool block can be had (every block is in use).
    pub fn load_offloaded(&mut self, key: &BlockKey) -> Result<Option<u32>> {
        if !self.is_offloaded(key) {
            return Ok(None);
        }
        let block = self.allocate()?;
        let mut buf = std::mem::take(&mut self.scratch);
        buf.resize(self.block_bytes(), 0);
        let loaded = self.offload.as_mut().is_some_and(|t| t.load(key, &mut buf));
        if loaded {
            self.block_bytes_in(block, &buf);
            self.prefix.insert(block, key.clone());
        }
        self.scratch = buf;
        if !loaded {
            self.free(block);
            let lost = self.offload.as_mut().map(|t| t.take_lost());
            for k in lost.unwrap_or_default() {
                if let Some(b) = self.prefix.find(&k) {
                    self.write_through(b, &k);
                }
            }
            return Ok(None);
        }
        Ok(Some(block))
    }

    /// Hand a newly cached block to the disk tier (write-through) unless it has it.
    pub(super) fn write_through(&self, block: u32, key: &BlockKey) {
        if let Some(t) = &self.offload {
            if t.wants(key) {
                t.store(key.clone(), self.block_bytes_out(block));
            }
        }
    }
}
