//! What [`LlmEngine::step`](crate::engine::llm_engine::LlmEngine::step) returns and
//! records: each step's batch and time ([`StepRecord`]), the tokens sampled
//! ([`SeqEvent`]), and the requests that ended ([`Finished`]).
use crate::engine::{Generation, StepEvent};
use serde::Serialize;

/// What one step did (for the step-latency chart, JSON and `serve`'s page).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct StepRecord {
    /// The step number (1 for the engine's first step that ran a forward pass).
    pub step: u64,
    /// Sequences in the forward pass.
    pub batch_size: usize,
    /// Of them, decoding (one token each).
    pub decode_seqs: usize,
    /// Tokens run (decode tokens + prefill chunk tokens).
    pub tokens: usize,
    /// Prefill tokens among them.
    pub prefill_tokens: usize,
    /// Wall time of the step: schedule, forward, sample (ms).
    pub ms: f64,
    /// Of it, scheduling (ms).
    pub schedule_ms: f64,
    /// Of it, the batched forward pass (ms).
    pub forward_ms: f64,
    /// Of it, committing rows, caching prompt blocks and sampling (ms).
    pub sample_ms: f64,
    /// Blocks in use after the step.
    pub blocks_used: usize,
    /// Cached prefix blocks no sequence uses (evictable) after the step.
    pub blocks_cached: usize,
    /// Speculative draft tokens the step verified (among `tokens`).
    pub draft_tokens: usize,
    /// Of them, accepted (the rest's rows were rolled back).
    pub accepted_tokens: usize,
}

/// One sampled token of one sequence.
#[derive(Debug, Clone, Serialize)]
pub struct SeqEvent {
    /// The sequence ([`crate::engine::llm_engine::LlmEngine::add_request`]'s id).
    pub seq_id: usize,
    /// The token, its text and timing.
    pub step: StepEvent,
}

/// A finished request: its generation (tokens, text, stats) and what the engine did for it.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The sequence id.
    pub seq_id: usize,
    /// Tokens, text, finish reason, TTFT/TPOT/ITL and KV figures.
    pub generation: Generation,
    /// Prompt tokens served by the prefix cache.
    pub cached_prompt_tokens: usize,
    /// Times it was preempted and recomputed.
    pub preemptions: usize,
    /// Most KV blocks it held at once.
    pub peak_blocks: usize,
    /// Why it failed, with finish reason [`FinishReason::Error`](crate::engine::FinishReason).
    pub error: Option<String>,
    /// What its speculative verify steps proposed and kept (zero without speculation).
    pub spec: crate::engine::spec::SpecStats,
}

/// Everything one step produced.
#[derive(Debug, Default)]
pub struct StepOutput {
    /// Tokens sampled this step.
    pub events: Vec<SeqEvent>,
    /// Requests that ended this step.
    pub finished: Vec<Finished>,
}
