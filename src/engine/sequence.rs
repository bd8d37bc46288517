//! [`Sequence`]: one request inside the batched engine — its tokens, block table, output
//! side (sampler, stop state, text, per-token timings) and its counters.
use crate::engine::accept::{Accepted, Acceptor, Logits, Turn};
use crate::engine::{Request, StepEvent};
use crate::kv::BlockTable;
use crate::model::Tokenizer;
use anyhow::Result;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// Where [`Detokenizer`] lived before it had its own file (`engine::sequence::Detokenizer`
/// is still its path for callers).
pub use crate::engine::detokenizer::Detokenizer;

/// One request in the batched engine.
///
/// `tokens` is the prompt followed by the generated tokens; `table.len()` of them have their
/// K/V rows in the pool (`num_computed`). A running sequence has at least one token still to
/// run: the rest of its prompt (prefill, perhaps in chunks), or the last sampled token
/// (decode). A preempted sequence keeps its tokens and `num_prompt`, so its recompute runs
/// each row on the same kernels as before (design rule R1).
pub struct Sequence {
    /// Engine-wide id, in arrival order.
    pub id: usize,
    /// The request as submitted.
    pub request: Request,
    /// Prompt, then generated tokens.
    pub tokens: Vec<u32>,
    /// Prompt length (tokens).
    pub num_prompt: usize,
    /// Which kernels its prompt rows run on: part of its prefix-cache keys.
    pub prompt_class: crate::kv::KernelClass,
    /// The sequence's logical → physical blocks; its length is the tokens computed.
    pub table: BlockTable,
    /// Hash chain of the prompt's full blocks, as far as they are known
    /// ([`crate::kv::prefix_cache`]).
    pub block_hashes: Vec<u128>,
    /// Sampler, stop state, text, events and token times (since `arrival`).
    pub output: Acceptor,
    /// When the request arrived (`add_request`).
    pub arrival: Instant,
    /// When its first chunk was scheduled.
    pub first_scheduled: Option<Instant>,
    /// Prompt tokens served by the prefix cache at admission (the last admission's count).
    pub cached_prompt_tokens: usize,
    /// Times it was preempted (its blocks freed, to be recomputed).
    pub preemptions: usize,
    /// Most blocks it held at once.
    pub peak_blocks: usize,
    /// Prefill chunks run since its last admission.
    pub prefill_chunks: usize,
    /// Draft tokens at the end of `tokens` this step verifies (speculative decoding; 0
    /// outside a step: the scheduler appends them, the step's verification takes them off).
    pub num_drafts: usize,
    /// What its verify steps proposed and kept.
    pub spec: crate::engine::spec::SpecStats,
    /// How it speculates (its request's choice, else the engine's `--spec`); None: plain.
    pub speculative: Option<crate::engine::spec::Speculative>,
    /// Its recent acceptance, for the turn-down rule.
    pub acceptance: crate::engine::spec::Acceptance,
    /// Its draft model's cache and generator (`--spec draft`); None otherwise.
    pub draft: Option<crate::engine::spec::draft::DraftSeq>,
    /// The draft model's proposal for its next step, made before the step is scheduled.
    pub draft_next: crate::engine::spec::draft::Drafted,
    /// The draft model's distribution at each of this step's drafts (sampled drafts only).
    pub draft_q: Vec<Vec<f32>>,
    /// Its token eviction (`--kv-evict`); None: every row kept.
    pub evict: Option<crate::kv::evict::EvictState>,
}

impl Sequence {
    /// Tokens whose K/V rows are in the pool.
    pub fn num_computed(&self) -> usize {
        self.table.len()
    }

    /// Tokens still to run before the next token can be sampled (≥ 1 while running).
    pub fn pending(&self) -> usize {
        self.tokens.len() - self.num_computed()
    }

    /// Generated tokens so far (drafts being verified not counted).
    pub fn num_generated(&self) -> usize {
        self.tokens.len() - self.num_drafts - self.num_prompt
    }

    /// Tokens its next chunk runs within a step's `budget`: what is pending, but never past
    /// its next eviction point (evictions happen at the same positions however it is
    /// chunked, batched or recomputed).
    pub fn chunk(&self, budget: usize) -> usize {
        let want = self.pending().min(budget);
        match &self.evict {
            Some(e) => want.min(e.next_point(self.num_computed()) - self.num_computed()),
            None => want,
        }
    }

    /// Whether a step running `tokens` of its pending tokens runs a prefill chunk (its prompt,
    /// or a recompute after preemption) rather than a decode row (with its drafts, if any).
    pub fn is_prefill(&self, tokens: usize) -> bool {
        tokens > 1 + self.num_drafts || self.num_generated() == 0
    }

    /// Whether its next step is a decode: one pending token, the last one sampled.
    pub fn is_decoding(&self) -> bool {
        self.pending() == 1 && self.num_generated() > 0 && self.num_drafts == 0
    }

    /// Sample, stamp, detokenize and emit its next token from its row of the step's
    /// `logits` (through [`Acceptor::accept`], as the one-request loop does), holding at most
    /// `max_len` tokens; token times count from its arrival.
    ///
    /// Errors: as [`Acceptor::accept`].
    pub fn accept(
        &mut self,
        tokenizer: &Tokenizer,
        max_len: usize,
        interrupt: &AtomicBool,
        logits: Logits<'_>,
        emit: impl FnOnce(&StepEvent) -> Result<()>,
    ) -> Result<Accepted> {
        let turn = Turn {
            tokenizer,
            origin: self.arrival,
            num_prompt: self.num_prompt,
            max_len,
            interrupt,
        };
        self.output.accept(&turn, &mut self.tokens, logits, emit)
    }
}

impl std::fmt::Debug for Sequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequence")
            .field("id", &self.id)
            .field("tokens", &self.tokens.len())
            .field("num_prompt", &self.num_prompt)
            .field("num_computed", &self.num_computed())
            .finish()
    }
}
