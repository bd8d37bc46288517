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
//!
//! After the forward pass the scheduler also owns what happens to its running sequences:
//! [`Scheduler::commit`] keeps a chunk's rows (and files prompt blocks in the prefix cache,
//! [`crate::engine::prefix_cache`]), [`Scheduler::remove`] and [`Scheduler::drain`] take
//! sequences out when they end.
use crate::engine::prefix_cache::{cache_prompt_blocks, lookup_prefix, PrefixHit};
use crate::engine::sequence::Sequence;
use crate::kv::KvPool;
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
    /// What a decode step's extra rows cost, fitted from the engine's timed decode steps
    /// (the turn-down rule's price of a draft).
    pub verify_cost: crate::engine::spec::VerifyCost,
    /// Most tokens a sequence may hold (`--max-model-len`): no draft reaches past it.
    pub max_model_len: usize,
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
        let mut batch = crate::engine::spec::BatchShape::new(
            self.running.iter().map(|s| s.acceptance.last_choice()),
        );
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            self.draft(i, budget, pool, &mut batch);
            let want = self.running[i].chunk(budget);
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
            // An evicting sequence rewrites its blocks in place: it shares none.
            let found = if config.enable_prefix_caching && seq.evict.is_none() {
                lookup_prefix(&mut seq, pool)
            } else {
                PrefixHit::default()
            };
            let hit = found.tokens;
            let want = seq.chunk(budget);
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
                if config.enable_prefix_caching && seq.evict.is_none() {
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

    /// Speculative decoding: append drafts to running sequence `i` when it decodes. Drafts
    /// never take what the sequences after it need this step: a row of the `budget` and a
    /// block each stay for them (no draft rather than a starved or preempted sequence). No
    /// draft reaches `--max-model-len` (the token sampled there ends the request) or past
    /// its `max_new_tokens`. Unless the request forces it, the sequence's acceptance and the
    /// measured verify cost choose how many drafts to verify ([`Acceptance::choose`]), in a
    /// step of the size `batch` (the other sequences' drafts) says.
    ///
    /// [`Acceptance::choose`]: crate::engine::spec::Acceptance::choose
    fn draft(
        &mut self,
        i: usize,
        budget: usize,
        pool: &mut KvPool,
        batch: &mut crate::engine::spec::BatchShape,
    ) {
        let rows = self.running.len();
        let later = rows - i - 1;
        let seq = &mut self.running[i];
        let Some(spec) = &seq.speculative else {
            return;
        };
        if !seq.is_decoding() {
            crate::engine::spec::Speculative::skip(&mut seq.acceptance, batch);
            return;
        }
        let remaining = seq
            .request
            .max_new_tokens
            .saturating_sub(seq.num_generated());
        let limit = budget
            .saturating_sub(1 + later)
            .min(self.max_model_len.saturating_sub(seq.tokens.len() + 1))
            .min(remaining.saturating_sub(1));
        let next = std::mem::take(&mut seq.draft_next);
        let mut drafts = if spec.uses_draft_model() {
            // Proposed before the schedule, as many as the rule chose then.
            next.tokens
        } else {
            let mut d = spec.propose(&seq.tokens, seq.num_prompt, limit);
            let n = spec.how_many(&mut seq.acceptance, d.len(), batch, &self.verify_cost, 0);
            d.truncate(n);
            d
        };
        drafts.truncate(limit);
        if drafts.is_empty() {
            return;
        }
        let groups = pool.groups().groups.len();
        let new_blocks = crate::kv::BlockTable::blocks_for(
            seq.num_computed() + 1 + drafts.len(),
            pool.block_size(),
        )
        .saturating_sub(seq.table.num_logical_blocks());
        if pool.num_free_blocks() < (new_blocks + later) * groups
            || seq
                .table
                .reserve(pool, seq.num_computed() + 1 + drafts.len())
                .is_err()
        {
            return;
        }
        seq.num_drafts = drafts.len();
        seq.draft_q = next.q;
        seq.draft_q.truncate(drafts.len());
        seq.tokens.extend(drafts);
    }

    /// Free `seq`'s blocks and mark it waiting, to be recomputed from its tokens.
    fn preempt(&mut self, seq: &mut Sequence, pool: &mut KvPool) {
        seq.table.release(pool);
        seq.block_hashes.clear();
        if let Some(e) = &mut seq.evict {
            e.reset();
        }
        seq.preemptions += 1;
        self.preemptions += 1;
        self.preempted.push(seq.id);
    }
}

impl Scheduler {
    /// Count a prefill chunk for every sequence of `plan` that runs one (its
    /// `prefill_chunks`); runs after the forward pass, before [`Self::commit`].
    pub fn count_prefill_chunks(&mut self, plan: &[Scheduled]) {
        for s in plan {
            let seq = &mut self.running[s.index];
            if seq.is_prefill(s.tokens) {
                seq.prefill_chunks += 1;
            }
        }
    }

    /// Keep the rows the forward pass wrote for `s`: commit them to its block table, note
    /// its peak blocks, file its completed prompt blocks in the prefix cache (when
    /// `prefix_caching`), and give back the blocks its sliding windows no longer read.
    /// Returns the sequence, to sample its next token.
    pub fn commit(
        &mut self,
        s: &Scheduled,
        pool: &mut KvPool,
        prefix_caching: bool,
    ) -> &mut Sequence {
        let seq = &mut self.running[s.index];
        let new_len = seq.num_computed() + s.tokens;
        seq.table.commit(new_len, pool.block_size());
        seq.peak_blocks = seq.peak_blocks.max(seq.table.num_blocks());
        // With prefix caching off nothing is cached, so a freed block goes back to the
        // free list (cached ones stayed evictable and every request materialized a new
        // block: ~1 block of resident memory per request).
        if prefix_caching && seq.evict.is_none() {
            cache_prompt_blocks(seq, pool);
        }
        // At an eviction point the policy packs the rows it keeps and gives blocks back.
        if let Some(e) = &mut seq.evict {
            e.after_commit(pool, &mut seq.table);
        }
        // Sliding-window groups give back the blocks their next token no longer reads
        // (a cached prompt block stays cached, evictable).
        seq.table.drop_out_of_window(pool);
        seq
    }

    /// Take running sequence `index` (as [`Scheduled::index`] gave it this step) out of the
    /// running queue; the ones after it move down by one, so a caller taking several takes
    /// the highest index first.
    pub fn take_running(&mut self, index: usize) -> Sequence {
        self.running.remove(index)
    }

    /// Take sequence `seq_id` out of the running or waiting queue; `None` when neither holds it.
    pub fn remove(&mut self, seq_id: usize) -> Option<Sequence> {
        if let Some(i) = self.running.iter().position(|s| s.id == seq_id) {
            Some(self.running.remove(i))
        } else if let Some(i) = self.waiting.iter().position(|s| s.id == seq_id) {
            self.waiting.remove(i)
        } else {
            None
        }
    }

    /// Take every sequence out: running ones first (admission order), then waiting ones.
    pub fn drain(&mut self) -> Vec<Sequence> {
        self.running
            .drain(..)
            .chain(self.waiting.drain(..))
            .collect()
    }
}
