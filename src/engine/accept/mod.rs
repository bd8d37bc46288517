//! [`Acceptor`]: the one place a sampled token enters a sequence — sample it from the
//! logits, stamp its time, detokenize it (text and stop conditions) and emit its
//! [`StepEvent`]. The one-request loop ([`fn@crate::engine::generate`]) and the batched engine
//! ([`crate::engine::llm_engine::LlmEngine::step`]) both accept every token through it, so
//! their tokens, text and per-token timings are computed by the same lines.
mod rows;
pub use rows::{accept_rows, Verdict};

use crate::engine::detokenizer::Detokenizer;
use crate::engine::generation::StepEvent;
use crate::engine::sampling::rejection::DraftRng;
use crate::engine::stats::ms;
use crate::engine::{FinishReason, Request, Sampler};
use crate::model::Tokenizer;
use anyhow::Result;
use candle_core::Tensor;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A sequence's output side: what samples its next token and turns it into text, and what it
/// has produced so far.
pub struct Acceptor {
    /// Samples the next token.
    pub sampler: Sampler,
    /// Text and stop state.
    pub detok: Detokenizer,
    /// The generated text so far.
    pub text: String,
    /// Every sampled token's event, in order.
    pub steps: Vec<StepEvent>,
    /// Time of each sampled token since the sequence's time origin.
    pub token_times: Vec<Duration>,
}

/// The logits a token is sampled from, as each loop has them: the one-request loop keeps
/// the decoder's tensor, the batched engine one row per sequence. Each form keeps its own
/// sampling path ([`Sampler::sample`] / [`Sampler::sample_vec`]), so the tokens are what
/// each loop sampled before they shared this code.
pub enum Logits<'a> {
    /// The decoder's logits tensor (`[vocab_size]`).
    Tensor(&'a Tensor),
    /// One sequence's row of a batched forward pass.
    Row(Vec<f32>),
    /// A row borrowed from a verify step's logits (copied only when the pick needs it).
    RowRef(&'a [f32]),
    /// A verify step's row whose input token `draft` the draft model drew from `q`
    /// (`[vocab_size]` probabilities): the token comes from rejection sampling
    /// ([`crate::engine::sampling::Sampler::judge_draft`]), its draws from `rng`.
    Judged {
        /// The row's logits (`[vocab_size]`).
        row: &'a [f32],
        /// The draft at this position.
        draft: u32,
        /// The draft model's distribution the draft was drawn from.
        q: &'a [f32],
        /// The sequence's draft generator.
        rng: &'a mut DraftRng,
    },
}

/// What the sequence is and where it stands, for one accepted token.
#[derive(Clone, Copy)]
pub struct Turn<'a> {
    /// Detokenizes the token.
    pub tokenizer: &'a Tokenizer,
    /// Where the sequence's token times count from (the request's start or arrival).
    pub origin: Instant,
    /// Prompt tokens at the front of the sequence's ids.
    pub num_prompt: usize,
    /// Most tokens the sequence may hold (the context window, or `--max-model-len`).
    pub max_len: usize,
    /// Ctrl-C: read once the token is sampled and stamped, and ends the request there.
    pub interrupt: &'a AtomicBool,
}

/// The outcome of [`Acceptor::accept`].
#[derive(Debug)]
pub enum Accepted {
    /// The token was sampled, recorded and emitted.
    Token {
        /// The sampled token id (now the last of the sequence's ids).
        token: u32,
        /// Why the request ends here, if it does.
        finish: Option<FinishReason>,
    },
    /// The logits could not be sampled (NaN from an overflow): nothing was recorded. The
    /// batched engine ends that request alone; the one-request loop fails with it.
    Unsampleable(anyhow::Error),
}

impl Acceptor {
    /// For `request`, with the tokenizer's own end-of-sequence / end-of-turn ids.
    pub fn new(tokenizer: &Tokenizer, request: &Request) -> Acceptor {
        Acceptor {
            sampler: Sampler::new(&request.sampling),
            detok: Detokenizer::new(tokenizer, request),
            text: String::new(),
            steps: Vec::new(),
            token_times: Vec::new(),
        }
    }

    /// Sample the next token from `logits` (penalising by `ids`, the prompt and the tokens
    /// generated so far), stamp its time, append it to `ids`, detokenize it, record its
    /// event and hand it to `emit`.
    ///
    /// Errors: a token the tokenizer cannot decode, or an error from `emit` (a closed
    /// stdout). A sampling failure is [`Accepted::Unsampleable`], not an error.
    pub fn accept(
        &mut self,
        turn: &Turn<'_>,
        ids: &mut Vec<u32>,
        logits: Logits<'_>,
        emit: impl FnOnce(&StepEvent) -> Result<()>,
    ) -> Result<Accepted> {
        let sampled = match logits {
            Logits::Tensor(t) => self.sampler.sample(t, ids),
            Logits::Row(v) => self.sampler.sample_vec(v, ids),
            Logits::RowRef(v) => self.sampler.sample_slice(v, ids),
            Logits::Judged { row, draft, q, rng } => {
                self.sampler.judge_draft(row, draft, q, ids, rng)
            }
        };
        let token = match sampled {
            Ok(t) => t,
            Err(e) => return Ok(Accepted::Unsampleable(e)),
        };
        let now = turn.origin.elapsed();
        let latency = now - self.token_times.last().copied().unwrap_or_default();
        self.token_times.push(now);
        ids.push(token);
        let generated = ids.len() - turn.num_prompt;
        let interrupted = turn.interrupt.load(Ordering::Relaxed);
        let (delta, finish) = self.detok.push(
            turn.tokenizer,
            token,
            generated,
            ids.len(),
            turn.max_len,
            interrupted,
        )?;
        self.text.push_str(&delta);
        let event = StepEvent {
            index: generated - 1,
            token_id: token,
            text_delta: delta,
            position: ids.len() - 1,
            latency_ms: ms(latency),
            elapsed_ms: ms(now),
        };
        emit(&event)?;
        self.steps.push(event);
        Ok(Accepted::Token { token, finish })
    }

    /// Release the text held back (an abort): see [`Detokenizer::flush`].
    ///
    /// Errors: detokenizing the held-back tokens fails.
    pub fn flush(&mut self, tokenizer: &Tokenizer) -> Result<()> {
        let (rest, _) = self.detok.flush(tokenizer)?;
        self.text.push_str(&rest);
        Ok(())
    }
}
