//! [`Detokenizer`]: the per-token text and stop logic of a request — streamed text,
//! stop strings held back while they might still match, end-of-sequence and stop ids,
//! `max_new_tokens`, the context window, Ctrl-C. Every sampled token goes through it (via
//! [`crate::engine::accept::Acceptor`]).
use crate::engine::stop::StopMatcher;
use crate::engine::{FinishReason, Request};
use crate::model::{TextStream, Tokenizer};
use anyhow::Result;

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
