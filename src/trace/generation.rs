//! The trace of one request run by [`fn@crate::engine::generate`] (`generate`, `bench
//! --compare`), which has no engine events: derived from its [`Generation`] afterwards.
//! Step 1 is the prefill (TTFT: the forward pass, then sampling the first token); each
//! further token is one decode step, from the previous token to this one (its ITL, all
//! counted as the forward pass). Blocks are counted from the tokens held (one block per
//! `block_size` tokens in each KV group), as the request's own pool held them.
use crate::engine::trace::{RequestEvent, RequestPhase, StepTrace, TraceEvent};
use crate::engine::DecodeMode;
use crate::engine::Generation;
use std::time::{Duration, Instant};

/// The sequence id a lone request gets in the trace.
pub const LONE_SEQ_ID: usize = 0;

/// Events of `g`, a generation that started at `started` (just before `generate` was
/// called): queued and admitted at the start, one prefill chunk, first token, finished.
pub fn generation_events(g: &Generation, started: Instant) -> Vec<TraceEvent> {
    let s = &g.stats;
    let kv = &s.kv_cache;
    let at = |ms: f64| started + Duration::from_secs_f64(ms.max(0.0) / 1e3);
    let bs = kv.block_size.max(1);
    let groups = match kv.tokens.div_ceil(bs) {
        0 => 1,
        full => kv.blocks.div_ceil(full).max(1),
    };
    let block_bytes = match kv.blocks {
        0 => 0,
        b => kv.bytes_held / b as u64,
    };
    let prompt = s.prompt_tokens;
    let request = |at: Instant, phase| {
        TraceEvent::Request(RequestEvent {
            seq_id: LONE_SEQ_ID,
            at,
            phase,
        })
    };
    let step =
        |step: u64, from_ms: f64, forward_ms: f64, sample_ms: f64, tokens: usize, prefill: bool| {
            let held = (prompt + step as usize - 1).min(prompt + g.tokens.len());
            let blocks = held.div_ceil(bs) * groups;
            TraceEvent::Step(StepTrace {
                step,
                start: at(from_ms),
                schedule: Duration::ZERO,
                forward: Duration::from_secs_f64(forward_ms.max(0.0) / 1e3),
                sample: Duration::from_secs_f64(sample_ms.max(0.0) / 1e3),
                batch_size: 1,
                decode_seqs: usize::from(!prefill),
                prefill_seqs: usize::from(prefill),
                tokens,
                prefill_tokens: if prefill { tokens } else { 0 },
                blocks_used: blocks,
                blocks_cached: 0,
                bytes_allocated: kv.bytes_allocated.max(blocks as u64 * block_bytes),
                bytes_held: blocks as u64 * block_bytes,
            })
        };
    let mut ev = vec![
        request(
            started,
            RequestPhase::Queued {
                prompt_tokens: prompt,
            },
        ),
        request(started, RequestPhase::Admitted { cached_tokens: 0 }),
        request(
            started,
            RequestPhase::PrefillChunk {
                step: 1,
                index: 1,
                of: 1,
                start_pos: 0,
                tokens: prompt,
                end: at(s.prefill_ms),
            },
        ),
    ];
    let ttft = if g.steps.is_empty() {
        s.prefill_ms
    } else {
        s.ttft_ms
    };
    ev.push(step(
        1,
        0.0,
        s.prefill_ms,
        ttft - s.prefill_ms,
        prompt,
        true,
    ));
    if let Some(first) = g.steps.first() {
        ev.push(request(at(first.elapsed_ms), RequestPhase::FirstToken));
    }
    for (k, w) in g.steps.windows(2).enumerate() {
        let tokens = match s.decode_mode {
            DecodeMode::Naive => w[1].position,
            _ => 1,
        };
        let ms = w[1].elapsed_ms - w[0].elapsed_ms;
        ev.push(step(k as u64 + 2, w[0].elapsed_ms, ms, 0.0, tokens, false));
    }
    let end = g.steps.last().map_or(s.e2el_ms, |e| e.elapsed_ms);
    ev.push(request(
        at(end.max(s.e2el_ms)),
        RequestPhase::Finished {
            reason: g.finish_reason,
            generated_tokens: g.tokens.len(),
        },
    ));
    ev
}
