//! [`Sequence`]: one request inside the batched engine — its tokens, block table, sampler,
//! stop state and timings — and [`Detokenizer`], the per-token text and stop logic shared
//! with the one-request decode loop.
use crate::engine::stop::StopMatcher;
use crate::engine::{FinishReason, Request, Sampler};
use crate::kv::BlockTable;
use crate::model::{TextStream, Tokenizer};
use anyhow::Result;
use std::time::{Duration, Instant};

/// Turns sampled tokens into streamed text and decides when a request ends: end-of-sequence
/// ids, stop strings (held back while they might still match), `max_new_tokens`, the
/// context window, Ctrl-C.
#[derive(Debug)]
pub struct Detokenizer {
    stream: TextStream,
    stops: StopMatcher,
    /// The model's end-of-sequence / end-of-turn ids (skipped with `ignore_eos`).
    eos_ids: Vec<u32>,
    /// The request's own stop ids (`stop_token_ids`), sorted: they end it even with
    /// `ignore_eos`, as in vLLM.
    stop_ids: Vec<u32>,
    ignore_eos: bool,
    max_new_tokens: usize,
}

impl Detokenizer {
    /// For `request`, with the tokenizer's own end-of-sequence / end-of-turn ids.
    pub fn new(tokenizer: &Tokenizer, request: &Request) -> Detokenizer {
        // Sorted for a binary search per token (a request may list many).
        let mut stop_ids = request.stop_token_ids.clone();
        stop_ids.sort_unstable();
        stop_ids.dedup();
        Detokenizer {
            stream: TextStream::new(),
            stops: StopMatcher::new(&request.stop_strings),
            eos_ids: tokenizer.stop_token_ids.clone(),
            stop_ids,
            ignore_eos: request.ignore_eos,
            max_new_tokens: request.max_new_tokens,
        }
    }

    /// The `generated`-th token (1-based count after it) at sequence length `len`
    /// (prompt + generated, this token included): returns the text it completes and, when
    /// it ends the request, why. `interrupted` (Ctrl-C) ends the request here;
    /// `context` is the most tokens the sequence may hold.
    ///
    /// Errors: a token the tokenizer cannot decode.
    pub fn push(
        &mut self,
        tokenizer: &Tokenizer,
        token: u32,
        generated: usize,
        len: usize,
        context: usize,
        interrupted: bool,
    ) -> Result<(String, Option<FinishReason>)> {
        let is_eos = (!self.ignore_eos && self.eos_ids.contains(&token))
            || self.stop_ids.binary_search(&token).is_ok();
        let (mut delta, hit_stop) = if is_eos {
            (String::new(), false)
        } else {
            self.stops.push(&self.stream.push(tokenizer, token)?)
        };
        let mut finish = if is_eos {
            Some(FinishReason::Eos)
        } else if hit_stop {
            Some(FinishReason::StopString)
        } else if interrupted {
            Some(FinishReason::Interrupted)
        } else if generated >= self.max_new_tokens {
            Some(FinishReason::Length)
        } else if len >= context {
            Some(FinishReason::ContextFull)
        } else {
            None
        };
        // Every end but a matched stop string releases what was held back: a partial stop
        // string that never completed is plain text (end-of-sequence included: before, a
        // reply ending "… Paris." with a stop string "Paris.XYZ" lost "Paris.").
        // The released text can complete a stop string (text held back behind a split
        // character): the request then ended at that stop.
        if finish.is_some_and(|f| f != FinishReason::StopString) {
            let (rest, hit_stop) = self.flush(tokenizer)?;
            delta.push_str(&rest);
            if hit_stop {
                finish = Some(FinishReason::StopString);
            }
        }
        Ok((delta, finish))
    }

    /// The text held back, released at the end (an incomplete character at the very end is
    /// dropped, as vLLM's and TGI's detokenizers drop it; a partial stop string is plain
    /// text after all), and whether it completed a stop string (the text then ends before
    /// it).
    pub fn flush(&mut self, tokenizer: &Tokenizer) -> Result<(String, bool)> {
        let (mut rest, hit_stop) = self.stops.push(&self.stream.flush(tokenizer)?);
        if !hit_stop {
            rest.push_str(&self.stops.flush());
        }
        Ok((rest, hit_stop))
    }
}

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
    /// Samples the next token.
    pub sampler: Sampler,
    /// Text and stop state.
    pub detok: Detokenizer,
    /// The generated text so far.
    pub text: String,
    /// Every sampled token's event, in order.
    pub steps: Vec<crate::engine::StepEvent>,
    /// When the request arrived (`add_request`).
    pub arrival: Instant,
    /// When its first chunk was scheduled.
    pub first_scheduled: Option<Instant>,
    /// Time of each sampled token since arrival.
    pub token_times: Vec<Duration>,
    /// Prompt tokens served by the prefix cache at admission (the last admission's count).
    pub cached_prompt_tokens: usize,
    /// Times it was preempted (its blocks freed, to be recomputed).
    pub preemptions: usize,
    /// Most blocks it held at once.
    pub peak_blocks: usize,
    /// Prefill chunks run since its last admission.
    pub prefill_chunks: usize,
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

    /// Generated tokens so far.
    pub fn num_generated(&self) -> usize {
        self.tokens.len() - self.num_prompt
    }

    /// Whether a step running `tokens` of its pending tokens runs a prefill chunk (its prompt,
    /// or a recompute after preemption) rather than one decode row.
    pub fn is_prefill(&self, tokens: usize) -> bool {
        tokens > 1 || self.num_generated() == 0
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
