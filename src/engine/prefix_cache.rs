//! The sequence side of automatic prefix caching: at admission, point a sequence's block
//! table at cached blocks that already hold its prompt's leading full blocks (from the pool,
//! or past it the disk tier); after a step, file its newly completed prompt blocks in the
//! cache. The index itself (hash chain, cached and evictable blocks) is the pool's
//! ([`crate::kv::prefix_cache`]); the [`Scheduler`](crate::engine::scheduler::Scheduler)
//! decides when these run.
use crate::engine::sequence::Sequence;
use crate::kv::pool::DROPPED;
use crate::kv::{BlockKey, KvPool, ROOT_HASH};

/// What a prefix lookup served: prompt tokens in all, and of them those read back from the
/// disk tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixHit {
    /// Prompt tokens served (pool and disk).
    pub tokens: usize,
    /// Of them, tokens whose blocks came from the disk tier (a logical block counts when any
    /// of its groups' blocks did).
    pub disk_tokens: usize,
}

/// Point `seq`'s empty block table at the cached blocks that hold its prompt's leading full
/// blocks, from the pool or, past it, the disk tier (`--kv-offload-dir`); returns what was
/// served. The last prompt token is always computed (its logits are needed), so at most
/// `min(num_prompt, tokens − 1)` tokens are looked up.
///
/// A hybrid cache hits at `h` blocks only when every group can serve what the next token
/// needs (vLLM's hybrid manager): a full group every block before `h`, a sliding group of
/// window W the blocks from the one holding position `h · B + 1 − W` on (checked right to
/// left, from the longest full-group hit down); the blocks before that are not taken.
///
/// A disk read that fails (a corrupt file, one another process deleted) or a pool with no
/// block to read into undoes the lookup and looks again (without that block, or without
/// the disk), so a hit is always bytes that were checked. The blocks an undone attempt read
/// from disk stay in the pool's prefix cache, and the next attempt takes them from there:
/// they still count as disk hits.
pub fn lookup_prefix(seq: &mut Sequence, pool: &mut KvPool) -> PrefixHit {
    pool.refresh_offload();
    let mut use_disk = pool.offload().is_some();
    // Logical blocks (by index in the prompt) this lookup has read from disk so far.
    let mut read = Vec::new();
    for attempt in 0.. {
        match try_lookup(seq, pool, use_disk && attempt < 8, &mut read) {
            Ok(hit) => return hit,
            Err(full) => {
                seq.table.release(pool);
                seq.block_hashes.clear();
                use_disk &= !full;
            }
        }
    }
    PrefixHit::default()
}

/// One lookup; `Err(true)`: the pool had no block for a disk read, `Err(false)`: a disk
/// read failed or a planned pool hit was evicted by one (the caller releases the table).
/// `read[b]`: logical block `b` was read from disk by this or an earlier attempt.
fn try_lookup(
    seq: &mut Sequence,
    pool: &mut KvPool,
    use_disk: bool,
    read: &mut Vec<bool>,
) -> Result<PrefixHit, bool> {
    let bs = pool.block_size();
    let limit = seq.num_prompt.min(seq.tokens.len() - 1);
    let candidates = limit / bs;
    read.resize(candidates, false);
    let mut keys = Vec::with_capacity(candidates);
    let mut parent = ROOT_HASH;
    for b in 0..candidates {
        let key = BlockKey {
            parent,
            group: 0,
            class: seq.prompt_class,
            tokens: seq.tokens[b * bs..(b + 1) * bs].to_vec(),
        };
        parent = key.hash();
        keys.push(key);
    }
    let windows: Vec<Option<usize>> = pool.groups().groups.iter().map(|g| g.window).collect();
    let in_group = |g: usize, b: usize| BlockKey {
        group: g as u32,
        ..keys[b].clone()
    };
    let cached = |pool: &KvPool, g: usize, b: usize| {
        let k = in_group(g, b);
        pool.is_cached(&k) || (use_disk && pool.is_offloaded(&k))
    };
    let first_needed =
        |w: Option<usize>, h: usize| w.map_or(0, |w| (h * bs + 1).saturating_sub(w) / bs);
    // Full groups: the longest run of cached blocks from the start.
    let mut hit = candidates;
    for g in (0..windows.len()).filter(|&g| windows[g].is_none()) {
        hit = hit.min(
            (0..candidates)
                .find(|&b| !cached(pool, g, b))
                .unwrap_or(candidates),
        );
    }
    // Sliding groups: right to left, the longest hit whose windows are cached too.
    while hit > 0 {
        let ok = windows
            .iter()
            .enumerate()
            .all(|(g, &w)| w.is_none() || (first_needed(w, hit)..hit).all(|b| cached(pool, g, b)));
        if ok {
            break;
        }
        hit -= 1;
    }
    let mut disk_blocks = 0;
    for (b, key) in keys.iter().enumerate().take(hit) {
        let mut blocks = Vec::with_capacity(windows.len());
        let mut from_disk = read[b];
        for (g, &w) in windows.iter().enumerate() {
            if b < first_needed(w, hit) {
                blocks.push(DROPPED);
                continue;
            }
            let k = in_group(g, b);
            let got = match pool.share_cached(&k) {
                Some(block) => Ok(Some((block, false))),
                None if use_disk => pool
                    .load_offloaded(&k)
                    .map(|b| b.map(|b| (b, true)))
                    .map_err(|_| true),
                None => Ok(None),
            };
            match got {
                Ok(Some((block, disk))) => {
                    from_disk |= disk;
                    read[b] |= disk;
                    blocks.push(block);
                }
                Ok(None) | Err(_) => {
                    for &b in blocks.iter().filter(|&&b| b != DROPPED) {
                        pool.free(b);
                    }
                    return Err(matches!(got, Err(true)));
                }
            }
        }
        disk_blocks += usize::from(from_disk);
        seq.table.push_cached_groups(&blocks, bs);
        seq.block_hashes.push(key.hash());
    }
    Ok(PrefixHit {
        tokens: seq.table.len(),
        disk_tokens: disk_blocks * bs,
    })
}

/// After a step committed `seq`'s new rows: file each newly completed block that lies wholly
/// inside the prompt in the prefix cache (keyed by the hash chain, kernel class Prompt), in
/// every layer group that still holds it.
pub fn cache_prompt_blocks(seq: &mut Sequence, pool: &mut KvPool) {
    let bs = pool.block_size();
    let full = seq.num_prompt.min(seq.num_computed()) / bs;
    while seq.block_hashes.len() < full {
        let b = seq.block_hashes.len();
        let key = BlockKey {
            parent: seq.block_hashes.last().copied().unwrap_or(ROOT_HASH),
            group: 0,
            class: seq.prompt_class,
            tokens: seq.tokens[b * bs..(b + 1) * bs].to_vec(),
        };
        let hash = key.hash();
        for g in 0..pool.groups().groups.len() {
            let block = seq.table.group(g).get(b).copied().unwrap_or(DROPPED);
            if block != DROPPED {
                let key = BlockKey {
                    group: g as u32,
                    ..key.clone()
                };
                pool.cache_block(block, key);
            }
        }
        seq.block_hashes.push(hash);
    }
}
