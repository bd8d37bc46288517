//! What a request produces, whichever loop ran it: [`StepEvent`] (one sampled token, as
//! streamed) and [`Generation`] (the whole result: tokens, text, events, finish reason,
//! stats).
use crate::engine::{FinishReason, GenerationStats};
use serde::Serialize;

/// One sampled token, as streamed to the caller.
#[derive(Debug, Clone, Serialize)]
pub struct StepEvent {
    /// 0 for the first generated token.
    pub index: usize,
    /// The sampled token id.
    pub token_id: u32,
    /// Text this token completed (empty while a character or a possible stop string is
    /// incomplete).
    pub text_delta: String,
    /// The token's position in the sequence (prompt length + index).
    pub position: usize,
    /// Time since the previous token, or since the start for the first (ms).
    pub latency_ms: f64,
    /// Time since the request started (ms).
    pub elapsed_ms: f64,
}

/// The result of a generation.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Every sampled token id (a final end-of-sequence token included).
    pub tokens: Vec<u32>,
    /// The generated text (stop strings and end tokens excluded).
    pub text: String,
    /// Per-token events, in order.
    pub steps: Vec<StepEvent>,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Timings and KV-cache bytes.
    pub stats: GenerationStats,
}
