//! What an [`LlmEngine`] holds that could grow with the requests and steps it has served
//! (issue 43: a server runs for days). Every figure has a cap that does not depend on how
//! long the engine ran; `tests/bounded_state.rs` asserts them over 10^5 steps.
use super::LlmEngine;

/// The engine's collections, by size (entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateSizes {
    /// Requests waiting (capped by the caller's queue limit: `serve --max-waiting-requests`).
    pub waiting: usize,
    /// Requests running (≤ `max_num_seqs`).
    pub running: usize,
    /// Step records kept (0 with `keep_steps(false)`, as `serve` runs).
    pub step_records: usize,
    /// Entries of the pool's largest list or map (≤ the pool's blocks).
    pub pool_index: usize,
    /// Tokens held by live sequences (each ≤ `max_model_len`).
    pub sequence_tokens: usize,
    /// Per-token records of live sequences (step events and token times; each ≤ the
    /// sequence's generated tokens).
    pub sequence_records: usize,
}

impl LlmEngine<'_> {
    /// The sizes of everything this engine keeps between steps.
    pub fn state_sizes(&self) -> StateSizes {
        let s = &self.scheduler;
        let seqs = s.waiting.iter().chain(s.running.iter());
        let (tokens, records) = seqs.fold((0, 0), |(t, r), q| {
            (
                t + q.tokens.len() + q.block_hashes.len(),
                r + q.output.steps.len() + q.output.token_times.len(),
            )
        });
        StateSizes {
            waiting: s.waiting.len(),
            running: s.running.len(),
            step_records: self.steps.len(),
            pool_index: self.pool.largest_index(),
            sequence_tokens: tokens,
            sequence_records: records,
        }
    }
}
