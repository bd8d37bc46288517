//! [`Scheduler`]: the waiting and running queues of continuous batching, and the decision of
//! what each engine step runs (vLLM V1's scheduler, simplified for one CPU engine).
//!
//! Each step has a token budget (`--max-num-batched-tokens`). Running sequences come first,
//! oldest first: a decoding sequence takes one token, a prefilling one the next chunk of its
//! prompt (chunked prefill), so decoding never stalls behind a long prompt for more than one
//! chunk. Then waiting sequences are admitted, while the budget, `--max-num-seqs` and the
//! KV pool allow, after looking their prompt up in the prefix cache.
//!
//! When the pool cannot give a running sequence the block its next token needs, the most
//! recently admitted sequence is preempted: its blocks go back to the pool and it returns to
//! the front of the waiting queue, to be recomputed later (vLLM's recompute preemption). Its
//! prompt blocks stay in the prefix cache until evicted, so its recompute often hits.
use crate::engine::sequence::Sequence;
use crate::kv::block_table::DROPPED;
use crate::kv::{BlockKey, KvPool, ROOT_HASH};
use std::collections::VecDeque;
use std::time::Instant;

/// Limits of the batched engine (vLLM's flag names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Most sequences running at once (`--max-num-seqs`).
    pub max_num_seqs: usize,
    /// Most tokens run by one step, decode tokens and prefill chunks together
    /// (`--max-num-batched-tokens`).
    pub max_num_batched_tokens: usize,
    /// Share full prompt blocks between sequences (`--enable-prefix-caching`).
    pub enable_prefix_caching: bool,
}

/// What one step runs: sequence `running[index]` feeds `tokens` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    /// Index into the running queue.
    pub index: usize,
    /// Tokens this step runs for it (1 for a decode, a chunk for a prefill).
    pub tokens: usize,
}

/// The waiting and running queues.
#[derive(Debug, Default)]
pub struct Scheduler {
    /// Sequences not admitted yet, in arrival order (preempted ones at the front).
    pub waiting: VecDeque<Sequence>,
    /// Admitted sequences, oldest admission first.
    pub running: Vec<Sequence>,
    /// Prompt tokens looked up in the prefix cache at each request's first admission (vLLM's
    /// `prefix_cache_queries`; 0 with prefix caching off).
    pub prefix_queries_tokens: u64,
    /// Prompt tokens the prefix cache's pool served at those lookups (vLLM's
    /// `prefix_cache_hits`).
    pub prefix_hits_tokens: u64,
    /// Prompt tokens read back from the disk tier at those lookups (vLLM's
    /// `external_prefix_cache_hits`; 0 without `--kv-offload-dir`).
    pub prefix_disk_hits_tokens: u64,
    /// Preemptions so far.
    pub preemptions: u64,
    /// The last [`Scheduler::schedule`]'s admissions: (sequence id, prompt tokens the prefix
    /// cache served).
    pub admitted: Vec<(usize, usize)>,
    /// The last [`Scheduler::schedule`]'s preempted sequence ids.
    pub preempted: Vec<usize>,
}

impl Scheduler {
    /// Decide this step's work under `config`, taking blocks from `pool` for every scheduled
    /// token (preempting when it runs out) and admitting waiting sequences.
    pub fn schedule(&mut self, config: &SchedulerConfig, pool: &mut KvPool) -> Vec<Scheduled> {
        let mut budget = config.max_num_batched_tokens;
        self.admitted.clear();
        self.preempted.clear();
        let mut plan = Vec::new();
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let want = self.running[i].pending().min(budget);
            let need = self.running[i].num_computed() + want;
            let mut scheduled = true;
            while self.running[i].table.reserve(pool, need).is_err() {
                preempted = true;
                let Some(mut victim) = self.running.pop() else {
                    break;
                };
                self.preempt(&mut victim, pool);
                let was_self = self.running.len() == i;
                self.waiting.push_front(victim);
                if was_self {
                    scheduled = false;
                    break;
                }
            }
            if !scheduled {
                break;
            }
            plan.push(Scheduled {
                index: i,
                tokens: want,
            });
            budget -= want;
            i += 1;
        }
        // Admit only when no one was preempted this step (the pool is tight).
        while !preempted && budget > 0 && self.running.len() < config.max_num_seqs {
            let Some(mut seq) = self.waiting.pop_front() else {
                break;
            };
            let found = if config.enable_prefix_caching {
                lookup_prefix(&mut seq, pool)
            } else {
                PrefixHit::default()
            };
            let hit = found.tokens;
            let want = seq.pending().min(budget);
            if seq.table.reserve(pool, seq.num_computed() + want).is_err() {
                seq.table.release(pool);
                seq.block_hashes.clear();
                self.waiting.push_front(seq);
                break;
            }
            // A request's lookup counts once, at its first admission (vLLM's
            // num_cached_tokens, and its fix of the counters, vllm #25780 / #43736): a
            // recompute after preemption finding its own freed blocks is not a new query or
            // hit, nor is an admission retried after its blocks ran out (not counted above,
            // before its reserve succeeded); with prefix caching off nothing is looked up.
            if seq.first_scheduled.is_none() {
                if config.enable_prefix_caching {
                    self.prefix_queries_tokens += seq.num_prompt as u64;
                    self.prefix_hits_tokens += (hit - found.disk_tokens) as u64;
                    self.prefix_disk_hits_tokens += found.disk_tokens as u64;
                }
                seq.cached_prompt_tokens = hit;
                seq.first_scheduled = Some(Instant::now());
            }
            seq.prefill_chunks = 0;
            self.admitted.push((seq.id, hit));
            plan.push(Scheduled {
                index: self.running.len(),
                tokens: want,
            });
            budget -= want;
            self.running.push(seq);
        }
        plan
    }

    /// Free `seq`'s blocks and mark it waiting, to be recomputed from its tokens.
    fn preempt(&mut self, seq: &mut Sequence, pool: &mut KvPool) {
        seq.table.release(pool);
        seq.block_hashes.clear();
        seq.preemptions += 1;
        self.preemptions += 1;
        self.preempted.push(seq.id);
    }
}

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
/// the disk), so a hit is always bytes that were checked.
fn lookup_prefix(seq: &mut Sequence, pool: &mut KvPool) -> PrefixHit {
    pool.refresh_offload();
    let mut use_disk = pool.offload().is_some();
    for attempt in 0.. {
        match try_lookup(seq, pool, use_disk && attempt < 8) {
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
fn try_lookup(seq: &mut Sequence, pool: &mut KvPool, use_disk: bool) -> Result<PrefixHit, bool> {
    let bs = pool.block_size();
    let limit = seq.num_prompt.min(seq.tokens.len() - 1);
    let candidates = limit / bs;
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
        let mut from_disk = false;
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
