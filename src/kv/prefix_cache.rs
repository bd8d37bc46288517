//! [`PrefixIndex`]: automatic prefix caching's lookup table (vLLM's "automatic prefix caching",
//! on top of PagedAttention): full blocks of prompt tokens, keyed by a hash chain, so that a
//! new sequence whose prompt starts with the same tokens points its block table at the
//! blocks already computed instead of prefilling them again.
//!
//! A block's key is `(parent hash, kernel class, its block_size token ids)`, and its hash
//! chains the parent's hash with the rest ([`chain_hash`], XXH3-128): two blocks share a hash
//! only when every token before and inside them matched (up to a 128-bit collision, which a
//! hit rules out by comparing the key itself, so a collision can cost a miss, never a wrong
//! K/V row). The hash is specified (XXH3, xxHash 0.8's spec) rather than std's
//! `DefaultHasher`, whose algorithm Rust may change: keys stay the same across builds and
//! restarts, so the disk tier ([`crate::kv::offload`]) can find a block written by an
//! earlier process.
//!
//! Only blocks wholly inside a prompt are cached, and the kernel class is part of the key:
//! a prompt row runs on the prefill kernels, a generated row on the decode kernels, and the
//! same token at the same position does not give the same bits on both (rule R1 of the
//! design). Blocks whose reference count drops to 0 stay cached, in least-recently-used
//! order, and are evicted only when the pool needs a block ([`crate::kv::KvPool::allocate`]).
use std::collections::{BTreeMap, HashMap};

/// Hash of the (empty) prefix before a sequence's first block.
pub const ROOT_HASH: u128 = 0x6e61_6e6f_6c6c_6d00_7072_6566_6978_0000;

/// Which kernels computed a block's rows: part of the key (design rule R1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelClass {
    /// Prompt rows: the prefill kernels (dense f32 GEMM when the weights have a dense copy).
    Prompt,
    /// Prompt rows of a short prompt run on the decode kernels (`--prefill-kernel auto`).
    QuantizedPrompt,
}

impl KernelClass {
    /// The byte that stands for the class in the hash and in the disk tier's files.
    pub fn code(self) -> u8 {
        match self {
            KernelClass::Prompt => 0,
            KernelClass::QuantizedPrompt => 1,
        }
    }

    /// The class of [`Self::code`] `c`; None for a byte no class has.
    pub fn from_code(c: u8) -> Option<KernelClass> {
        match c {
            0 => Some(KernelClass::Prompt),
            1 => Some(KernelClass::QuantizedPrompt),
            _ => None,
        }
    }
}

/// What a cached block holds: the tokens of its slots after a given prefix, for one layer
/// group of the pool (a hybrid cache keeps each group's block of the same tokens apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockKey {
    /// Hash of every block before this one ([`ROOT_HASH`] for the first block).
    pub parent: u128,
    /// The pool's layer group whose rows the block holds (0 for a one-group cache); not part
    /// of the hash chain, which names the tokens.
    pub group: u32,
    /// Kernels that computed the rows.
    pub class: KernelClass,
    /// The block's token ids, `block_size` of them.
    pub tokens: Vec<u32>,
}

impl BlockKey {
    /// This block's hash: [`chain_hash`] of its fields.
    pub fn hash(&self) -> u128 {
        chain_hash(self.parent, self.class, &self.tokens)
    }
}

/// The hash chain: XXH3-128 (seed 0) of the bytes `parent hash (16, little-endian) ‖ class
/// code (1) ‖ token ids (4 each, little-endian)`. A sequence's block `i` hashes the hash of
/// block `i − 1` with its own tokens, so a hash names the whole prefix up to the block's end.
/// The same bytes give the same hash in every build, process and machine.
pub fn chain_hash(parent: u128, class: KernelClass, tokens: &[u32]) -> u128 {
    let mut bytes = Vec::with_capacity(17 + 4 * tokens.len());
    bytes.extend_from_slice(&parent.to_le_bytes());
    bytes.push(class.code());
    for t in tokens {
        bytes.extend_from_slice(&t.to_le_bytes());
    }
    xxhash_rust::xxh3::xxh3_128(&bytes)
}

/// The pool's table of cached blocks: hash → block, each block's key, and the blocks no
/// sequence uses (reference count 0) in least-recently-used order.
#[derive(Debug, Default)]
pub struct PrefixIndex {
    /// (chain hash, group) → block.
    by_hash: HashMap<(u128, u32), u32>,
    key_of: HashMap<u32, BlockKey>,
    /// Evictable blocks by the tick they were released at (oldest first).
    lru: BTreeMap<u64, u32>,
    /// The tick each evictable block is filed under in `lru`.
    lru_tick: HashMap<u32, u64>,
    tick: u64,
    /// Blocks evicted so far.
    evictions: u64,
}

impl PrefixIndex {
    /// The block holding exactly `key`, if cached.
    pub fn find(&self, key: &BlockKey) -> Option<u32> {
        let block = *self.by_hash.get(&(key.hash(), key.group))?;
        (self.key_of.get(&block) == Some(key)).then_some(block)
    }

    /// Whether `block` is in the index.
    pub fn contains(&self, block: u32) -> bool {
        self.key_of.contains_key(&block)
    }

    /// File `block` under `key`; returns false (and changes nothing) when the key already
    /// names a block or the block already has a key.
    pub fn insert(&mut self, block: u32, key: BlockKey) -> bool {
        let hash = (key.hash(), key.group);
        if self.by_hash.contains_key(&hash) || self.key_of.contains_key(&block) {
            return false;
        }
        self.by_hash.insert(hash, block);
        self.key_of.insert(block, key);
        true
    }

    /// Blocks no sequence uses that stay cached (evictable).
    pub fn num_evictable(&self) -> usize {
        self.lru.len()
    }

    /// Blocks in the index (in use or evictable).
    pub fn len(&self) -> usize {
        self.key_of.len()
    }

    /// Blocks evicted so far (a cached block the pool took back for another use).
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// The key of cached `block` (in use or evictable).
    pub fn key_of(&self, block: u32) -> Option<&BlockKey> {
        self.key_of.get(&block)
    }

    /// Entries of the index's largest map (each holds at most one entry per pool block, so
    /// this never exceeds the pool's blocks however many requests were served).
    pub fn largest_map(&self) -> usize {
        self.by_hash
            .len()
            .max(self.key_of.len())
            .max(self.lru.len())
            .max(self.lru_tick.len())
    }

    /// True when no block is cached.
    pub fn is_empty(&self) -> bool {
        self.key_of.is_empty()
    }

    /// A cached block's reference count dropped to 0: it becomes the most recently used
    /// evictable block.
    pub fn release(&mut self, block: u32) {
        self.tick += 1;
        self.lru.insert(self.tick, block);
        self.lru_tick.insert(block, self.tick);
    }

    /// An evictable block is used again (a prefix hit): it leaves the LRU.
    pub fn reuse(&mut self, block: u32) {
        if let Some(t) = self.lru_tick.remove(&block) {
            self.lru.remove(&t);
        }
    }

    /// Evict the least recently used evictable block: it leaves the index and is returned
    /// for reuse. None when no block is evictable.
    pub fn evict(&mut self) -> Option<u32> {
        let (&t, &block) = self.lru.iter().next()?;
        self.lru.remove(&t);
        self.lru_tick.remove(&block);
        self.evictions += 1;
        if let Some(key) = self.key_of.remove(&block) {
            self.by_hash.remove(&(key.hash(), key.group));
        }
        Some(block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(parent: u128, tokens: &[u32]) -> BlockKey {
        BlockKey {
            parent,
            group: 0,
            class: KernelClass::Prompt,
            tokens: tokens.to_vec(),
        }
    }

    /// The hash is XXH3-128 of documented bytes: pinned, so a change of algorithm or byte
    /// order (which would orphan every file of the disk tier) fails here.
    #[test]
    fn the_hash_is_stable_across_builds() {
        let mut bytes = ROOT_HASH.to_le_bytes().to_vec();
        bytes.push(0);
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&2u32.to_le_bytes());
        let h = key(ROOT_HASH, &[1, 2]).hash();
        assert_eq!(h, xxhash_rust::xxh3::xxh3_128(&bytes));
        assert_eq!(format!("{h:032x}"), PINNED_HASH);
    }

    /// XXH3-128 of ROOT_HASH ‖ class 0 ‖ tokens [1, 2], from the reference C library
    /// (Python `xxhash.xxh3_128_hexdigest`, xxhash 3.x), not from our build.
    const PINNED_HASH: &str = "ec80e40edf0615d75872ff309fad08f6";

    #[test]
    fn the_hash_chains_the_whole_prefix() {
        let a = key(ROOT_HASH, &[1, 2]);
        let b = key(a.hash(), &[3, 4]);
        let b_other_parent = key(key(ROOT_HASH, &[1, 9]).hash(), &[3, 4]);
        assert_ne!(b.hash(), b_other_parent.hash());
        assert_eq!(b.hash(), key(a.hash(), &[3, 4]).hash());
        assert_ne!(
            key(ROOT_HASH, &[1, 2]).hash(),
            key(ROOT_HASH, &[2, 1]).hash()
        );
    }

    /// A key whose hash collides with a cached block but whose tokens differ is a miss.
    #[test]
    fn a_hit_compares_the_key_not_only_the_hash() {
        let mut idx = PrefixIndex::default();
        let a = key(ROOT_HASH, &[1, 2]);
        assert!(idx.insert(7, a.clone()));
        assert_eq!(idx.find(&a), Some(7));
        // Forge a collision: the same hash filed for different tokens.
        let forged = key(ROOT_HASH, &[5, 6]);
        idx.by_hash.insert((forged.hash(), 0), 7);
        assert_eq!(idx.find(&forged), None);
        // One block, one key; one key, one block.
        assert!(!idx.insert(8, a.clone()));
        assert!(!idx.insert(7, key(ROOT_HASH, &[3])));
    }

    #[test]
    fn eviction_is_least_recently_released_first_and_reuse_protects() {
        let mut idx = PrefixIndex::default();
        for (b, t) in [(1u32, 10u32), (2, 20), (3, 30)] {
            idx.insert(b, key(ROOT_HASH, &[t]));
        }
        idx.release(2);
        idx.release(1);
        idx.release(3);
        idx.reuse(1); // a hit on block 1: no longer evictable
        assert_eq!(idx.num_evictable(), 2);
        assert_eq!(idx.evict(), Some(2));
        assert_eq!(idx.find(&key(ROOT_HASH, &[20])), None);
        assert_eq!(idx.evict(), Some(3));
        assert_eq!(idx.evict(), None);
        assert_eq!(idx.find(&key(ROOT_HASH, &[10])), Some(1));
    }
}
