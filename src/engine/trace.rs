//! What the batched engine did, as events: each step's phases and batch, and each request's
//! life (queued, admitted, prefill chunks, first token, preempted, finished). The engine only
//! pushes these plain values (no text is formatted in the step loop); `--trace`
//! ([`crate::trace`]) turns them into Chrome trace-event JSON and `serve`'s page reads the
//! same counters through [`crate::engine::snapshot`].
//!
//! Recording is off unless [`crate::engine::llm_engine::LlmEngine::record_trace`] turned it
//! on; the owner drains the events after each step
//! ([`crate::engine::llm_engine::LlmEngine::take_trace`]), so the buffer holds one step's worth.
use crate::engine::FinishReason;
use std::time::{Duration, Instant};

/// One engine step that ran a forward pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTrace {
    /// The step number (1 for the first step that ran a forward pass).
    pub step: u64,
    /// When the step began (before scheduling).
    pub start: Instant,
    /// Scheduling: admission, prefix lookup, block reservation, preemption.
    pub schedule: Duration,
    /// The batched forward pass.
    pub forward: Duration,
    /// Committing rows, caching prompt blocks, sampling and detokenizing.
    pub sample: Duration,
    /// Sequences in the forward pass.
    pub batch_size: usize,
    /// Of them, decoding (one token each).
    pub decode_seqs: usize,
    /// Of them, running a prefill chunk.
    pub prefill_seqs: usize,
    /// Tokens run (decode tokens + prefill chunk tokens).
    pub tokens: usize,
    /// Prefill tokens among them.
    pub prefill_tokens: usize,
    /// Blocks in use by some block table after the step.
    pub blocks_used: usize,
    /// Cached prefix blocks no sequence uses (evictable) after the step.
    pub blocks_cached: usize,
    /// Bytes of the blocks the pool has materialized (`blocks · block bytes`).
    pub bytes_allocated: u64,
    /// Bytes of the blocks in use (`blocks_used · block bytes`).
    pub bytes_held: u64,
}

/// A change in one request's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestPhase {
    /// Added to the waiting queue.
    Queued {
        /// Prompt tokens.
        prompt_tokens: usize,
    },
    /// Admitted to the running batch (again, after a preemption).
    Admitted {
        /// Prompt tokens the prefix cache served at this admission.
        cached_tokens: usize,
    },
    /// A prefill chunk ran in step `step` (from the step's start to `end`).
    PrefillChunk {
        /// The step that ran it.
        step: u64,
        /// 1 for the first chunk since the request's (re-)admission.
        index: usize,
        /// Chunks this prefill takes at most, counting this one (the rest at the full
        /// `--max-num-batched-tokens`; decode rows in later steps can make it more).
        of: usize,
        /// Its first position.
        start_pos: usize,
        /// Tokens in the chunk.
        tokens: usize,
        /// When the step that ran it ended.
        end: Instant,
    },
    /// Its first token was sampled (decode begins).
    FirstToken,
    /// A speculative verify step ran in step `step`: `drafted` draft tokens, the first
    /// `accepted` kept, the rest's rows rolled back (`blocks_freed` whole blocks returned).
    Verified {
        /// The step that ran it.
        step: u64,
        /// Draft tokens verified.
        drafted: usize,
        /// Of them, kept.
        accepted: usize,
        /// Blocks the rollback gave back to the pool.
        blocks_freed: usize,
    },
    /// Preempted: its blocks went back to the pool; it waits to be recomputed.
    Preempted,
    /// Ended (its blocks went back to the pool).
    Finished {
        /// Why.
        reason: FinishReason,
        /// Tokens it generated.
        generated_tokens: usize,
    },
}

/// A request event: which sequence, when, what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestEvent {
    /// The sequence id ([`crate::engine::llm_engine::LlmEngine::add_request`]'s).
    pub seq_id: usize,
    /// When it happened.
    pub at: Instant,
    /// What happened.
    pub phase: RequestPhase,
}

/// One event of the engine's trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TraceEvent {
    /// A step ran.
    Step(StepTrace),
    /// A request changed phase.
    Request(RequestEvent),
}
