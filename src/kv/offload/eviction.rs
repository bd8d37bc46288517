//! The byte budget's eviction order over the [`Index`]'s files: first the files holding a
//! block whose chain no longer reaches its first block on disk (it hits only while the pool
//! holds the missing part), then least recently used first, where a file holding a block's
//! parent counts as used at least as recently as the block's own file
//! ([`Index::lift_ancestors`]) — so a prompt's last blocks go before its first: a chain
//! whose head is gone can never hit, and vLLM frees a request's blocks tail first for the
//! same reason.
use super::index::Index;
use crate::kv::ROOT_HASH;
use std::collections::{HashMap, HashSet};

/// The resolution of [`Index::touch`]: 1 ms.
const TOUCH_QUANTUM_NS: u128 = 1_000_000;

impl Index {
    /// The files to delete so that the files fit in `max_bytes`: first those holding a
    /// block whose chain does not reach the first block on disk ([`Self::reachable`]: it
    /// hits only while the pool holds the missing part), then the least recently used.
    pub fn over_budget(&self, max_bytes: u64) -> Vec<u64> {
        if self.total_bytes <= max_bytes {
            return Vec::new();
        }
        let reachable = self.reachable();
        // (whole chain on disk, last use, id): false sorts first.
        let mut order: Vec<(bool, u128, u64)> = self
            .files
            .iter()
            .map(|(&id, f)| {
                let whole = f.keys.iter().all(|(h, _)| reachable.contains(h));
                (whole, f.last_used, id)
            })
            .collect();
        order.sort_unstable();
        let mut total = self.total_bytes;
        let mut out = Vec::new();
        for (_, _, id) in order {
            if total <= max_bytes {
                break;
            }
            total -= self.files[&id].bytes;
            out.push(id);
        }
        out
    }

    /// Chain hashes on disk whose every ancestor is on disk too (in some layer group; a
    /// sliding-window group need not keep a prompt's early blocks), up to [`ROOT_HASH`].
    /// Each hash is visited once; a loop of hashes (a forged file) counts as unreachable.
    pub fn reachable(&self) -> HashSet<u128> {
        let mut parent_of: HashMap<u128, u128> = HashMap::with_capacity(self.blocks.len());
        for ((h, _), s) in &self.blocks {
            parent_of.insert(*h, s.key.parent);
        }
        let mut known: HashMap<u128, bool> = HashMap::with_capacity(parent_of.len());
        for &start in parent_of.keys() {
            let mut path = Vec::new();
            let mut h = start;
            let ok = loop {
                if h == ROOT_HASH {
                    break true;
                }
                if let Some(&k) = known.get(&h) {
                    break k;
                }
                let Some(&p) = parent_of.get(&h) else {
                    break false;
                };
                if path.len() > parent_of.len() {
                    break false;
                }
                path.push(h);
                h = p;
            };
            for h in path {
                known.insert(h, ok);
            }
        }
        known
            .into_iter()
            .filter(|&(_, ok)| ok)
            .map(|(h, _)| h)
            .collect()
    }

    /// Files other than `id` holding a parent of one of `id`'s blocks, in any layer group
    /// (a hit needs every group's blocks, so they age together).
    fn parent_files(&self, id: u64) -> Vec<u64> {
        let Some(f) = self.files.get(&id) else {
            return Vec::new();
        };
        let mut out: Vec<u64> = f
            .keys
            .iter()
            .filter_map(|k| self.blocks.get(k))
            .flat_map(|s| {
                (0..=self.max_group).filter_map(move |g| self.blocks.get(&(s.key.parent, g)))
            })
            .map(|s| s.file)
            .filter(|&p| p != id)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Mark file `id` used at `now` (ns since the epoch, rounded down to the millisecond)
    /// and every file holding an ancestor of its blocks used later, one nanosecond per step
    /// up the chain (see the module's eviction order). A file already marked that
    /// millisecond is left as it is: a lookup reads many blocks of one file, and each walk
    /// up the chain costs a hash lookup per block and layer group of every file on it. The
    /// walk stops where a file is already more recent, and after a bounded number of steps
    /// (a hostile directory cannot make it loop).
    pub fn touch(&mut self, id: u64, now: u128) {
        let now = now - now % TOUCH_QUANTUM_NS;
        match self.files.get_mut(&id) {
            Some(f) if f.last_used < now => f.last_used = now,
            _ => return,
        }
        self.lift_ancestors(id);
    }

    /// Make the files holding ancestors of `id`'s blocks at least one nanosecond per step
    /// more recently used than `id` (see [`Self::touch`]).
    pub fn lift_ancestors(&mut self, id: u64) {
        let mut frontier = vec![id];
        let mut steps = 0usize;
        let limit = 4 * self.files.len() + 64;
        while let Some(child) = frontier.pop() {
            let Some(t) = self.files.get(&child).map(|f| f.last_used + 1) else {
                continue;
            };
            for p in self.parent_files(child) {
                steps += 1;
                if steps > limit {
                    return;
                }
                if let Some(f) = self.files.get_mut(&p) {
                    if f.last_used < t {
                        f.last_used = t;
                        frontier.push(p);
                    }
                }
            }
        }
    }
}
