//! The decode loop: prefill, then one forward pass per generated token, with the KV cache's
//! lifetime set by the [`DecodeMode`].
use crate::engine::stats::{ms, KvStats};
use crate::engine::stop::StopMatcher;
use crate::engine::{DecodeMode, FinishReason, GenerationStats, Request, Sampler};
use crate::kv::KvCache;
use crate::model::{Decoder, TextStream, Tokenizer};
use crate::sizing::estimate::Layout;
use crate::sizing::spec::KvSpec;
use anyhow::{bail, Result};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

/// Generate for `request`: prefill, then decode until a stop condition, calling `on_step`
/// for each token as soon as it is sampled. Timing starts on entry (after tokenization).
///
/// `interrupt` (set by Ctrl-C) ends generation after the current step, with the stats so far.
///
/// Errors: an empty prompt, `max_new_tokens` = 0, a prompt that does not fit the context
/// window, tensor failures, or an error from `on_step` (e.g. a closed stdout).
pub fn generate(
    decoder: &Decoder,
    tokenizer: &Tokenizer,
    request: &Request,
    interrupt: &AtomicBool,
    mut on_step: impl FnMut(&StepEvent) -> Result<()>,
) -> Result<Generation> {
    let start = Instant::now();
    let config = decoder.config();
    let prompt_len = request.prompt_ids.len();
    if prompt_len == 0 {
        bail!("the prompt is empty (0 tokens)");
    }
    if request.max_new_tokens == 0 {
        bail!("--max-new-tokens must be at least 1");
    }
    let context = config.max_position_embeddings;
    if prompt_len >= context {
        bail!("the prompt is {prompt_len} tokens, which does not fit the context window of {context} tokens");
    }
    let mut sampler = Sampler::new(&request.sampling);
    let mut stop_ids = tokenizer.stop_token_ids.clone();
    stop_ids.extend(&request.stop_token_ids);
    let mut stream = TextStream::new();
    let mut stops = StopMatcher::new(&request.stop_strings);
    let mut ids = request.prompt_ids.clone();
    let shape = config.kv_shape(request.cache.dtype);
    // Address space for the most tokens this request can hold (memory is used block by block).
    let most_tokens = prompt_len
        .saturating_add(request.max_new_tokens)
        .min(context);
    let mut cache = KvCache::new(shape, request.cache.block_size, most_tokens)?;

    let t0 = Instant::now();
    let mut logits = decoder.forward_with(&ids, 0, prompt_len, &mut cache)?;
    let prefill = t0.elapsed();

    let mut tokens = Vec::new();
    let mut steps: Vec<StepEvent> = Vec::new();
    let mut times: Vec<Duration> = Vec::new();
    let mut text = String::new();
    let finish_reason = loop {
        let token = sampler.sample(&logits, &ids)?;
        let now = start.elapsed();
        let latency = now - times.last().copied().unwrap_or_default();
        times.push(now);
        tokens.push(token);
        ids.push(token);
        let is_eos = !request.ignore_eos && stop_ids.contains(&token);
        let (mut delta, hit_stop) = if is_eos {
            (String::new(), false)
        } else {
            stops.push(&stream.push(tokenizer, token)?)
        };
        let finish = if is_eos {
            Some(FinishReason::Eos)
        } else if hit_stop {
            Some(FinishReason::StopString)
        } else if interrupt.load(Ordering::Relaxed) {
            Some(FinishReason::Interrupted)
        } else if tokens.len() >= request.max_new_tokens {
            Some(FinishReason::Length)
        } else if ids.len() >= context {
            Some(FinishReason::ContextFull)
        } else {
            None
        };
        if matches!(
            finish,
            Some(FinishReason::Interrupted | FinishReason::Length | FinishReason::ContextFull)
        ) {
            // Last token: release what was held back (an incomplete character decodes
            // lossily, a partial stop string is plain text after all).
            let (rest, _) = stops.push(&stream.flush(tokenizer)?);
            delta.push_str(&rest);
            delta.push_str(&stops.flush());
        }
        text.push_str(&delta);
        let event = StepEvent {
            index: tokens.len() - 1,
            token_id: token,
            text_delta: delta,
            position: ids.len() - 1,
            latency_ms: ms(latency),
            elapsed_ms: ms(now),
        };
        on_step(&event)?;
        steps.push(event);
        if let Some(reason) = finish {
            break reason;
        }
        logits = match request.mode {
            DecodeMode::KvCache => {
                decoder.forward_with(&[token], cache.len(), prompt_len, &mut cache)?
            }
            DecodeMode::Naive => {
                cache.clear();
                decoder.forward_with(&ids, 0, prompt_len, &mut cache)?
            }
        };
    };
    let kv = kv_stats(&mut cache, most_tokens, context);
    let stats = GenerationStats::from_timings(request.mode, prompt_len, prefill, &times, kv);
    Ok(Generation {
        tokens,
        text,
        steps,
        finish_reason,
        stats,
    })
}

/// The cache's figures at the end of a request, next to `kv-size`'s arithmetic for the same
/// shape, dtype and block size; then the request's blocks go back to the pool.
fn kv_stats(cache: &mut KvCache, reserved_tokens: usize, context: usize) -> KvStats {
    let shape = cache.shape();
    let spec = KvSpec::from_shape(&shape);
    let tokens = cache.len();
    let paged = Layout {
        tp: 1,
        block_size: Some(cache.block_size() as u64),
    };
    let est = |t: usize, layout| {
        spec.kv_bytes(t as u64, 1, shape.dtype, layout)
            .unwrap_or(u64::MAX)
    };
    let mut kv = KvStats {
        dtype: shape.dtype.name(),
        block_size: cache.block_size(),
        tokens,
        blocks: cache.blocks_used(),
        last_block_tokens: cache.last_block_fill(),
        bytes_used: cache.bytes_used(),
        bytes_held: cache.bytes_held(),
        bytes_allocated: cache.bytes_allocated(),
        bytes_estimated: est(tokens, Layout::SINGLE),
        bytes_estimated_paged: est(tokens, paged),
        reserved_tokens,
        reserved_bytes: est(reserved_tokens, Layout::SINGLE),
        context_tokens: context,
        context_bytes: est(context, Layout::SINGLE),
        blocks_leaked: 0,
    };
    cache.clear();
    kv.blocks_leaked = cache.pool.num_used_blocks();
    kv
}
