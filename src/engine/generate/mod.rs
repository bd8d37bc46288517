//! The one-request decode loop: prefill, then one forward pass per generated token, with the
//! KV cache's lifetime set by the [`DecodeMode`] (naive decode recomputes the whole sequence
//! each step). Each token is accepted through [`Acceptor`], as the batched engine's are.
mod speculative;

use crate::engine::accept::{Accepted, Acceptor, Logits, Turn};
use crate::engine::evict::{chunk_end, forward_step};
use crate::engine::spec::draft::DraftSeq;
use crate::engine::spec::{Acceptance, SpecChoice, SpecReport, VerifyCost};
use crate::engine::stats::{KvRotation, KvStats, MoeStats};
use crate::engine::validate::{check, Limits, RequestError};
use crate::engine::{DecodeMode, FinishReason, Generation, GenerationStats, Request, StepEvent};
use crate::kv::{BlockTable, KvCache, KvPool};
use crate::model::{Decoder, Tokenizer};
use crate::sizing::estimate::Layout;
use crate::sizing::spec::KvSpec;
use anyhow::{anyhow, bail, Result};
use speculative::{GenDraft, SpecRun};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Generate for `request`: prefill, then decode until a stop condition, calling `on_step`
/// for each token as soon as it is sampled. Timing starts on entry (after tokenization).
///
/// `interrupt` (set by Ctrl-C) ends generation after the current step, with the stats so far.
///
/// Errors: a request [`check`] refuses (an empty prompt, `max_new_tokens` = 0, a prompt that
/// does not fit the context window, token ids outside the vocabulary, sampling settings),
/// tensor failures, or an error from `on_step` (e.g. a closed stdout).
pub fn generate(
    decoder: &Decoder,
    tokenizer: &Tokenizer,
    request: &Request,
    interrupt: &AtomicBool,
    on_step: impl FnMut(&StepEvent) -> Result<()>,
) -> Result<Generation> {
    generate_with_draft(decoder, None, tokenizer, request, interrupt, on_step)
}

/// [`generate`] with a draft model for `--spec draft` (checked by the caller to share the
/// target's vocabulary: [`crate::engine::spec::draft::check_compatible`]). Its KV cache is
/// its own, of the request's dtype and block size, one full-attention group.
///
/// Errors: as [`generate`]; a draft-model request without `draft`.
pub fn generate_with_draft(
    decoder: &Decoder,
    draft: Option<&Decoder>,
    tokenizer: &Tokenizer,
    request: &Request,
    interrupt: &AtomicBool,
    mut on_step: impl FnMut(&StepEvent) -> Result<()>,
) -> Result<Generation> {
    let start = Instant::now();
    let config = decoder.config();
    let prompt_len = request.prompt_ids.len();
    let context = config.max_position_embeddings;
    let limits = Limits {
        max_len: context,
        vocab_size: config.vocab_size,
        refuse_past_max_len: false,
    };
    check(request, &limits).map_err(|e| refusal(e, context))?;
    if request.mode == DecodeMode::Naive && matches!(request.speculative, SpecChoice::On(_)) {
        bail!("--spec needs a KV cache to verify drafts in: it does not combine with --decode naive, which recomputes the whole sequence every step");
    }
    let speculative = request.speculative.resolve(None);
    crate::engine::evict::check(&request.cache, speculative.is_some(), config)?;
    if request.cache.evict.is_some() && request.mode == DecodeMode::Naive {
        bail!("--kv-evict needs a KV cache to evict from: it does not combine with --decode naive, which recomputes the whole sequence every step");
    }
    let mut evict = request.cache.evict.map(|e| {
        crate::kv::evict::EvictState::new(
            e,
            prompt_len,
            config.num_hidden_layers,
            config.num_attention_heads,
            config.num_key_value_heads,
        )
    });
    let draft = match (speculative.filter(|s| s.uses_draft_model()), draft) {
        (None, _) => None,
        (Some(_), None) => bail!("--spec draft needs a draft model: add --draft-model FILE"),
        (Some(s), Some(d)) => {
            let c = d.config();
            // The draft holds at most the sequence and its drafts, within both windows.
            let most = prompt_len
                .saturating_add(request.max_new_tokens)
                .saturating_add(s.k)
                .min(context)
                .min(c.max_position_embeddings);
            let blocks = most.div_ceil(request.cache.block_size.max(1)).max(1)
                * c.kv_groups(true).groups.len().max(1);
            Some(GenDraft {
                decoder: d,
                pool: KvPool::with_groups(
                    c.kv_shape(request.cache.dtype),
                    c.kv_groups(true),
                    request.cache.block_size,
                    blocks,
                )?,
                seq: DraftSeq::new(request.sampling.seed),
            })
        }
    };
    let mut output = Acceptor::new(tokenizer, request);
    let mut ids = request.prompt_ids.clone();
    let shape = config.kv_shape(request.cache.dtype);
    // Address space for the most tokens this request can hold (memory is used block by block).
    let most_tokens = prompt_len
        .saturating_add(request.max_new_tokens)
        .min(context);
    let groups = config.kv_groups(request.cache.swa_full || request.mode == DecodeMode::SwaFull);
    let mut cache = KvCache::with_groups(shape, groups, request.cache.block_size, most_tokens)?;

    let counts_before = decoder.expert_counts();
    let t0 = Instant::now();
    let Some(mut logits) = forward_chunked(
        decoder,
        &ids,
        prompt_len,
        &mut cache,
        interrupt,
        evict.as_mut(),
    )?
    else {
        return interrupted_in_prefill(&mut cache, request, prompt_len, t0, most_tokens, context);
    };
    let prefill = t0.elapsed();
    let counts_prefill = decoder.expert_counts();

    let turn = Turn {
        tokenizer,
        origin: start,
        num_prompt: prompt_len,
        max_len: context,
        interrupt,
    };
    let mut spec_report = None;
    let finish_reason = if let Some(spec) = &speculative {
        let mut report = SpecReport::new(spec);
        let first = output.accept(&turn, &mut ids, Logits::Tensor(&logits), |ev| on_step(ev))?;
        let reason = match first {
            Accepted::Token {
                finish: Some(reason),
                ..
            } => reason,
            Accepted::Token { .. } => {
                let mut run = SpecRun {
                    decoder,
                    spec,
                    turn: &turn,
                    sampling: &request.sampling,
                    max_new_tokens: request.max_new_tokens,
                    acceptance: Acceptance::default(),
                    cost: VerifyCost::for_draft(decoder, draft.as_ref().map(|d| d.decoder)),
                    report: &mut report,
                    draft,
                };
                run.decode(&mut output, &mut ids, &mut cache, &mut on_step)?
            }
            Accepted::Unsampleable(e) => return Err(e),
        };
        report.finish();
        spec_report = Some(report);
        reason
    } else {
        loop {
            let accepted =
                output.accept(&turn, &mut ids, Logits::Tensor(&logits), |ev| on_step(ev))?;
            let token = match accepted {
                Accepted::Token {
                    finish: Some(reason),
                    ..
                } => break reason,
                Accepted::Token { token, .. } => token,
                Accepted::Unsampleable(e) => return Err(e),
            };
            logits = match request.mode {
                DecodeMode::KvCache | DecodeMode::SwaFull => match &mut evict {
                    None => decoder.forward_with(&[token], cache.len(), prompt_len, &mut cache)?,
                    Some(e) => {
                        let l = forward_step(decoder, &[token], prompt_len, &mut cache, Some(e))?;
                        let vocab = l.len();
                        candle_core::Tensor::from_vec(l, vocab, decoder.device())?
                    }
                },
                DecodeMode::Naive => {
                    cache.clear();
                    // A full recompute is one long prompt-like pass: chunked too, so Ctrl-C
                    // stops it within one chunk.
                    match forward_chunked(decoder, &ids, prompt_len, &mut cache, interrupt, None)? {
                        Some(l) => l,
                        None => break FinishReason::Interrupted,
                    }
                }
            };
        }
    };
    let kv = kv_stats(&mut cache, most_tokens, context);
    let mut stats =
        GenerationStats::from_timings(request.mode, prompt_len, prefill, &output.token_times, kv);
    stats.spec = spec_report;
    // The routers' counters are the decoder's, shared with any other caller running it at
    // the same time (not `generate`'s use): the figures are this request's when alone.
    if let (Some(b), Some(p), Some(e), Some(m)) = (
        counts_before,
        counts_prefill,
        decoder.expert_counts(),
        config.moe,
    ) {
        let active =
            crate::model::decoder::weights_held::WeightsHeld::active_per_token(decoder.weights());
        let shape = (m.num_experts, m.num_experts_per_tok, active);
        stats.moe = Some(MoeStats::between(&b, &p, &e, shape));
    }
    Ok(Generation {
        tokens: ids[prompt_len..].to_vec(),
        text: output.text,
        steps: output.steps,
        finish_reason,
        stats,
    })
}

/// `generate`'s own words for a refused request (its flags and the context window; the
/// batched engine words them after `--max-model-len`).
fn refusal(e: RequestError, context: usize) -> anyhow::Error {
    match e {
        RequestError::ZeroMaxTokens => anyhow!("--max-new-tokens must be at least 1"),
        RequestError::PromptTooLong { prompt, .. } => anyhow!(
            "the prompt is {prompt} tokens, which does not fit the context window of {context} tokens"
        ),
        other => other.into(),
    }
}

/// Tokens per forward pass when `generate` prefills (and when naive decode recomputes): the
/// prompt runs in chunks of this many tokens, each attending to the cached rows of the
/// earlier chunks (bit-identical to one pass), so Ctrl-C stops a long prefill within one
/// chunk (~1–1.5 s here) instead of after the whole prompt. Dense GEMMs of 512 rows are as
/// fast per row as longer ones on this machine (compute-bound from ~64 rows on).
pub const PREFILL_CHUNK_TOKENS: usize = 512;

/// Run `ids[cache.len()..]` through the decoder in chunks of [`PREFILL_CHUNK_TOKENS`],
/// positions below `prompt_end` on the prefill kernels, and return the last position's
/// logits; None when `interrupt` was set between two chunks (the cache then holds the
/// chunks that ran).
///
/// With `evict`, no chunk runs past an eviction point, and the policy evicts after each.
///
/// Errors: as [`Decoder::forward_with`].
fn forward_chunked(
    decoder: &Decoder,
    ids: &[u32],
    prompt_end: usize,
    cache: &mut KvCache,
    interrupt: &AtomicBool,
    mut evict: Option<&mut crate::kv::evict::EvictState>,
) -> Result<Option<candle_core::Tensor>> {
    loop {
        let start = cache.len();
        let mut end = (start + PREFILL_CHUNK_TOKENS).min(ids.len());
        let logits = match evict.as_deref_mut() {
            None => decoder.forward_with(&ids[start..end], start, prompt_end, cache)?,
            Some(e) => {
                end = chunk_end(start, end, Some(e));
                let l = forward_step(decoder, &ids[start..end], prompt_end, cache, Some(e))?;
                let vocab = l.len();
                candle_core::Tensor::from_vec(l, vocab, decoder.device())?
            }
        };
        if end == ids.len() {
            return Ok(Some(logits));
        }
        if interrupt.load(Ordering::Relaxed) {
            return Ok(None);
        }
    }
}

/// The result of a request interrupted (Ctrl-C) before its first token: no token, the stats
/// so far (the prefill time spent).
fn interrupted_in_prefill(
    cache: &mut KvCache,
    request: &Request,
    prompt_len: usize,
    t0: Instant,
    most_tokens: usize,
    context: usize,
) -> Result<Generation> {
    let prefill = t0.elapsed();
    let kv = kv_stats(cache, most_tokens, context);
    // Only the chunks that ran were prefilled: their rate, and the time spent as E2EL.
    let prefilled = kv.tokens;
    let mut stats = GenerationStats::from_timings(request.mode, prompt_len, prefill, &[], kv);
    stats.prefill_tokens_per_s = if prefill.as_secs_f64() > 0.0 {
        prefilled as f64 / prefill.as_secs_f64()
    } else {
        0.0
    };
    stats.e2el_ms = stats.prefill_ms;
    Ok(Generation {
        tokens: Vec::new(),
        text: String::new(),
        steps: Vec::new(),
        finish_reason: FinishReason::Interrupted,
        stats,
    })
}

/// The cache's figures at the end of a request, next to `kv-size`'s arithmetic for the same
/// shape, dtype and block size; then the request's blocks go back to the pool.
fn kv_stats(cache: &mut KvCache, reserved_tokens: usize, context: usize) -> KvStats {
    let mut kv = kv_stats_of(&cache.pool, &cache.table, reserved_tokens, context);
    cache.clear();
    kv.blocks_leaked = cache.pool.num_used_blocks();
    kv
}

/// A sequence's KV figures: its table's tokens and blocks in `pool`, the pool's allocation,
/// and `kv-size`'s estimates for the same shape, dtype and block size, for its tokens, for
/// a contiguous reservation of `reserved_tokens` and of the `context` window.
/// `blocks_leaked` is left 0 (the caller checks the pool once the blocks are back).
pub fn kv_stats_of(
    pool: &KvPool,
    table: &BlockTable,
    reserved_tokens: usize,
    context: usize,
) -> KvStats {
    let shape = pool.shape();
    let spec = KvSpec::from_kv_groups(&shape, pool.groups());
    let tokens = table.len();
    let bs = pool.block_size();
    let paged = Layout {
        tp: 1,
        block_size: Some(bs as u64),
    };
    // Rows the full-attention layers hold: fewer than the tokens after an eviction.
    let held_rows = table.rows(0);
    let est = |t: usize, layout| {
        spec.kv_bytes(t as u64, 1, shape.dtype, layout)
            .unwrap_or(u64::MAX)
    };
    let est_held = |layout| {
        spec.kv_bytes_evicted(tokens as u64, held_rows as u64, 1, shape.dtype, layout)
            .unwrap_or(u64::MAX)
    };
    let (mut held_full, mut held_sliding, mut sliding_layers, mut sliding_window) = (0, 0, 0, 0);
    for (g, group) in pool.groups().groups.iter().enumerate() {
        let bytes = (table.num_blocks_in(g) * pool.block_bytes()) as u64;
        match group.window {
            None => held_full += bytes,
            Some(w) => {
                held_sliding += bytes;
                sliding_layers += group.layers.len();
                sliding_window = w;
            }
        }
    }
    let full_cache = KvSpec::from_shape(&shape)
        .kv_bytes(tokens as u64, 1, shape.dtype, paged)
        .unwrap_or(u64::MAX);
    KvStats {
        sliding_layers,
        sliding_window,
        bytes_held_full: held_full,
        bytes_held_sliding: held_sliding,
        bytes_full_cache: full_cache,
        rotation: shape.dtype.rotated().then(|| KvRotation {
            layers: (0..shape.num_layers).collect(),
            head_dim: shape.head_dim,
            groups: crate::kv::codec_q4::rotation_groups(shape.head_dim),
        }),
        dtype: shape.dtype.name(),
        block_size: bs,
        tokens,
        tokens_evicted: tokens - held_rows,
        blocks: table.num_blocks(),
        last_block_tokens: table.last_block_fill(bs),
        // The rows the held tokens need (a sliding layer: its window's), as kv-size counts
        // them without paging.
        bytes_used: est_held(Layout::SINGLE),
        bytes_held: (table.num_blocks() * pool.block_bytes()) as u64,
        bytes_allocated: pool.bytes_allocated(),
        bytes_estimated: est_held(Layout::SINGLE),
        bytes_estimated_paged: est_held(paged),
        reserved_tokens,
        reserved_bytes: est(reserved_tokens, Layout::SINGLE),
        context_tokens: context,
        context_bytes: est(context, Layout::SINGLE),
        blocks_leaked: 0,
    }
}
