//! [`EngineState`]: a picture of the batched engine between two steps — every materialized
//! block of the pool with its state, holders and tokens, every sequence with its state and
//! block table, the last steps and finished requests, the counters. `serve` answers
//! `GET /v1/state` with it and streams it to the page (docs/observability.md).
//!
//! Building one walks the materialized blocks and the block tables once: O(blocks +
//! sequences' table entries), tens of microseconds for a few hundred blocks.
use crate::engine::llm_engine::{FinishedSummary, LlmEngine};
use crate::engine::step_output::StepRecord;
use crate::kv::pool::DROPPED;
use serde::Serialize;

/// What one block of the pool is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// On the free list (materialized, holding nothing anyone can use).
    Free,
    /// Named by one block table.
    Used,
    /// Named by several block tables (a prefix-cache hit shares it).
    Shared,
    /// In the prefix cache, named by no block table: evictable, reused on a hit.
    Cached,
}

/// One materialized block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockCell {
    /// The physical block id.
    pub id: u32,
    /// Its state.
    pub state: BlockState,
    /// Block tables naming it (its reference count).
    pub refs: u32,
    /// The layer group whose rows it holds (`None` when free).
    pub group: Option<u32>,
    /// Whether the prefix cache holds it (a full prompt block, keyed by its tokens).
    pub in_prefix_cache: bool,
    /// Running sequences whose tables name it.
    pub seqs: Vec<usize>,
    /// Its logical index in those tables (the same in each: a shared block is the same
    /// prefix).
    pub logical: Option<usize>,
    /// The positions it holds, first and last (inclusive), as far as they are computed.
    pub tokens: Option<[usize; 2]>,
    /// Whether those positions all lie in the prompt.
    pub prompt: bool,
}

/// Where a sequence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SeqState {
    /// Queued, never admitted.
    Waiting,
    /// Running a prefill chunk (its prompt, or a recompute).
    Prefilling,
    /// Producing one token a step.
    Decoding,
    /// Preempted: its blocks were freed; it waits to be recomputed.
    Preempted,
}

/// One unfinished sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeqView {
    /// The sequence id.
    pub id: usize,
    /// Its state.
    pub state: SeqState,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Of them, served by the prefix cache at its first admission.
    pub cached_tokens: usize,
    /// Generated tokens so far.
    pub generated_tokens: usize,
    /// Tokens whose K/V rows are in the pool.
    pub computed_tokens: usize,
    /// Most tokens it may generate.
    pub max_tokens: usize,
    /// Times it was preempted.
    pub preemptions: usize,
    /// While prefilling: chunks run since its admission, and at most how many in all
    /// (`[k, n]`, the rest at the full token budget).
    pub chunk: Option<[usize; 2]>,
    /// Its block table: per layer group, the physical block of each logical block
    /// (`null` where a sliding-window group gave the block back).
    pub block_table: Vec<Vec<Option<u32>>>,
}

/// One layer group of the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupView {
    /// Its index (a block cell's `group`).
    pub id: usize,
    /// Sliding window in tokens, `None` for full attention.
    pub window: Option<usize>,
    /// Model layers whose rows its blocks hold.
    pub layers: Vec<usize>,
    /// Materialized blocks holding its rows: `used + shared + cached` (a free block belongs
    /// to no group: the pool's `free` serve every group).
    pub blocks: usize,
    /// Of them, named by exactly one block table.
    pub used: usize,
    /// Named by several.
    pub shared: usize,
    /// Cached, named by no table (evictable).
    pub cached: usize,
    /// Token positions whose K/V rows its `used` and `shared` blocks hold for the running
    /// sequences (a shared block counted once): at most `(used + shared) × block_size`. Its
    /// cached blocks hold `cached × block_size` more (full prompt blocks).
    pub tokens: usize,
}

/// The pool's figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolView {
    /// Most blocks the pool will materialize (the KV budget).
    pub num_blocks: usize,
    /// Blocks materialized so far (the `blocks` list).
    pub materialized: usize,
    /// Blocks named by exactly one block table.
    pub used: usize,
    /// Blocks named by several.
    pub shared: usize,
    /// Cached blocks no table names (evictable).
    pub cached: usize,
    /// Materialized blocks on the free list.
    pub free: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Bytes per block.
    pub block_bytes: usize,
    /// The stored KV dtype.
    pub dtype: &'static str,
    /// Bytes of the materialized blocks.
    pub bytes_allocated: u64,
    /// The layer groups (one unless the model is hybrid).
    pub groups: Vec<GroupView>,
}

/// Running totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Counters {
    /// Requests added.
    pub requests_added: u64,
    /// Requests ended (finished, failed or aborted).
    pub requests_finished: u64,
    /// Tokens sampled.
    pub generated_tokens: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Cached blocks evicted.
    pub evictions: u64,
    /// Prompt tokens looked up in the prefix cache.
    pub prefix_queries_tokens: u64,
    /// Of them, served by its pool.
    pub prefix_hits_tokens: u64,
    /// Of them, read back from the disk tier (`--kv-offload-dir`; 0 without one).
    pub prefix_disk_hits_tokens: u64,
    /// Wall time of every step (ms).
    pub step_ms: f64,
}

/// The engine between two steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineState {
    /// Steps that ran a forward pass so far: the state is the one after this step.
    pub step: u64,
    /// The pool's figures.
    pub pool: PoolView,
    /// Every materialized block, by id.
    pub blocks: Vec<BlockCell>,
    /// Unfinished sequences: running (admission order), then waiting (queue order).
    pub sequences: Vec<SeqView>,
    /// The last requests that ended, oldest first.
    pub finished: Vec<FinishedSummary>,
    /// The last steps, oldest first.
    pub steps: Vec<StepRecord>,
    /// Running totals.
    pub counters: Counters,
}

impl LlmEngine<'_> {
    /// The engine's state now (between steps).
    pub fn snapshot(&self) -> EngineState {
        let pool = self.pool();
        let bs = pool.block_size();
        let mut blocks: Vec<BlockCell> = (0..pool.num_blocks() as u32)
            .map(|id| {
                let refs = pool.ref_count(id);
                let cached_group = pool.cached_group(id);
                BlockCell {
                    id,
                    state: match (refs, cached_group) {
                        (0, Some(_)) => BlockState::Cached,
                        (0, None) => BlockState::Free,
                        (1, _) => BlockState::Used,
                        _ => BlockState::Shared,
                    },
                    refs,
                    group: cached_group,
                    in_prefix_cache: cached_group.is_some(),
                    seqs: Vec::new(),
                    logical: None,
                    tokens: None,
                    prompt: false,
                }
            })
            .collect();
        let sched = self.scheduler();
        let mut sequences = Vec::with_capacity(sched.running.len() + sched.waiting.len());
        for seq in &sched.running {
            let computed = seq.num_computed();
            let groups = pool.groups().groups.len();
            let mut table = Vec::with_capacity(groups);
            for g in 0..groups {
                let list = seq.table.group(g);
                for (logical, &b) in list.iter().enumerate() {
                    let Some(cell) = blocks.get_mut(b as usize) else {
                        continue; // DROPPED
                    };
                    cell.seqs.push(seq.id);
                    cell.group = Some(g as u32);
                    cell.logical = Some(logical);
                    let first = logical * bs;
                    let end = ((logical + 1) * bs).min(computed);
                    cell.tokens = (first < computed).then_some([first, end - 1]);
                    cell.prompt = (logical + 1) * bs <= seq.num_prompt;
                }
                table.push(list.iter().map(|&b| (b != DROPPED).then_some(b)).collect());
            }
            let state = if seq.is_prefill(seq.pending()) {
                SeqState::Prefilling
            } else {
                SeqState::Decoding
            };
            let rest = seq.pending();
            let budget = self.config().scheduler.max_num_batched_tokens;
            sequences.push(SeqView {
                id: seq.id,
                state,
                prompt_tokens: seq.num_prompt,
                cached_tokens: seq.cached_prompt_tokens,
                generated_tokens: seq.num_generated(),
                computed_tokens: computed,
                max_tokens: seq.request.max_new_tokens,
                preemptions: seq.preemptions,
                chunk: (state == SeqState::Prefilling).then(|| {
                    [
                        seq.prefill_chunks,
                        seq.prefill_chunks + rest.div_ceil(budget),
                    ]
                }),
                block_table: table,
            });
        }
        for seq in &sched.waiting {
            sequences.push(SeqView {
                id: seq.id,
                state: if seq.preemptions > 0 {
                    SeqState::Preempted
                } else {
                    SeqState::Waiting
                },
                prompt_tokens: seq.num_prompt,
                cached_tokens: seq.cached_prompt_tokens,
                generated_tokens: seq.num_generated(),
                computed_tokens: 0,
                max_tokens: seq.request.max_new_tokens,
                preemptions: seq.preemptions,
                chunk: None,
                block_table: Vec::new(),
            });
        }
        let count = |s: BlockState| blocks.iter().filter(|b| b.state == s).count();
        let mut groups: Vec<GroupView> = pool
            .groups()
            .groups
            .iter()
            .enumerate()
            .map(|(id, g)| GroupView {
                id,
                window: g.window,
                layers: g.layers.clone(),
                blocks: 0,
                used: 0,
                shared: 0,
                cached: 0,
                tokens: 0,
            })
            .collect();
        for b in &blocks {
            let Some(g) = b.group.and_then(|g| groups.get_mut(g as usize)) else {
                continue;
            };
            match b.state {
                BlockState::Free => continue,
                BlockState::Used => g.used += 1,
                BlockState::Shared => g.shared += 1,
                BlockState::Cached => g.cached += 1,
            }
            g.blocks += 1;
            if let Some([first, last]) = b.tokens {
                g.tokens += last + 1 - first; // none yet: allocated, not computed
            }
        }
        let (queries, hits) = self.prefix_cache_counters();
        EngineState {
            step: self.steps_run(),
            pool: PoolView {
                num_blocks: pool.max_blocks(),
                materialized: pool.num_blocks(),
                used: count(BlockState::Used),
                shared: count(BlockState::Shared),
                cached: count(BlockState::Cached),
                free: count(BlockState::Free),
                block_size: bs,
                block_bytes: pool.block_bytes(),
                dtype: pool.dtype().name(),
                bytes_allocated: pool.bytes_allocated(),
                groups,
            },
            blocks,
            sequences,
            finished: self.recent_finished().iter().cloned().collect(),
            steps: self.recent_steps().iter().copied().collect(),
            counters: Counters {
                requests_added: self.requests_added(),
                requests_finished: self.requests_finished(),
                generated_tokens: self.generated_tokens(),
                preemptions: self.preemptions(),
                evictions: pool.evictions(),
                prefix_queries_tokens: queries,
                prefix_hits_tokens: hits,
                prefix_disk_hits_tokens: self.prefix_disk_hits(),
                step_ms: self.step_time().as_secs_f64() * 1e3,
            },
        }
    }
}
