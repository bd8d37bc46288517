//! What [`super::LlmEngine`] remembers of its past for `serve`'s page and `--trace`: bounded rings
//! of the last steps and finished requests, running counters, and (while recording is on)
//! the trace events of the current step. Everything here is a plain value pushed between
//! the step's phases; nothing formats text.
use crate::engine::scheduler::{Scheduled, Scheduler, SchedulerConfig};
use crate::engine::sequence::Sequence;
use crate::engine::step_output::{Finished, StepRecord};
use crate::engine::trace::{RequestEvent, RequestPhase, StepTrace, TraceEvent};
use crate::kv::KvPool;
use serde::Serialize;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Steps kept in [`super::LlmEngine::recent_steps`].
pub const RECENT_STEPS: usize = 300;

/// Finished requests kept in [`super::LlmEngine::recent_finished`].
pub const RECENT_FINISHED: usize = 64;

/// A finished request, as the page lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinishedSummary {
    /// The sequence id.
    pub id: usize,
    /// The engine step it ended in.
    pub step: u64,
    /// Why it ended (`eos`, `length`, …, as in `--json`).
    pub finish_reason: &'static str,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Of them, served by the prefix cache at its first admission.
    pub cached_tokens: usize,
    /// Generated tokens.
    pub generated_tokens: usize,
    /// Time to first token from its arrival in the engine (ms).
    pub ttft_ms: f64,
    /// Time per output token after the first (ms; `None` with one token).
    pub tpot_ms: Option<f64>,
    /// Each gap between two of its tokens (ms; ITL samples).
    pub itl_ms: Vec<f64>,
    /// Arrival to its last token (ms).
    pub e2el_ms: f64,
    /// Times it was preempted.
    pub preemptions: usize,
    /// Most KV blocks it held at once.
    pub peak_blocks: usize,
}

/// The engine's memory of what it did.
#[derive(Debug, Default)]
pub(super) struct Record {
    /// Steps that ran a forward pass.
    pub steps_run: u64,
    /// Wall time of those steps.
    pub step_time: Duration,
    /// Requests ended (finished, failed or aborted).
    pub requests_finished: u64,
    /// Tokens sampled.
    pub generated_tokens: u64,
    pub(super) recent_steps: VecDeque<StepRecord>,
    pub(super) recent_finished: VecDeque<FinishedSummary>,
    /// The current step's trace events, while recording.
    pub(super) trace: Option<Vec<TraceEvent>>,
}

impl Record {
    fn push(&mut self, seq_id: usize, at: Instant, phase: RequestPhase) {
        if let Some(t) = &mut self.trace {
            t.push(TraceEvent::Request(RequestEvent { seq_id, at, phase }));
        }
    }

    pub fn queued(&mut self, seq_id: usize, prompt_tokens: usize) {
        self.push(
            seq_id,
            Instant::now(),
            RequestPhase::Queued { prompt_tokens },
        );
    }

    /// The schedule's preemptions and admissions (preemptions first: a sequence preempted
    /// and admitted again in one step cannot happen, admission stops after a preemption).
    pub fn scheduled(&mut self, scheduler: &Scheduler, at: Instant) {
        if self.trace.is_none() {
            return;
        }
        for &id in &scheduler.preempted {
            self.push(id, at, RequestPhase::Preempted);
        }
        for &(id, cached_tokens) in &scheduler.admitted {
            self.push(id, at, RequestPhase::Admitted { cached_tokens });
        }
    }

    /// Trace the step's prefill chunks; runs after the forward pass and
    /// [`Scheduler::count_prefill_chunks`], before the rows are committed.
    pub fn chunks(
        &mut self,
        running: &[Sequence],
        plan: &[Scheduled],
        config: &SchedulerConfig,
        start: Instant,
        end: Instant,
    ) {
        if self.trace.is_none() {
            return;
        }
        for s in plan {
            let seq = &running[s.index];
            if !seq.is_prefill(s.tokens) {
                continue;
            }
            let rest = seq.pending() - s.tokens;
            let phase = RequestPhase::PrefillChunk {
                step: self.steps_run + 1,
                index: seq.prefill_chunks,
                of: seq.prefill_chunks + rest.div_ceil(config.max_num_batched_tokens),
                start_pos: seq.num_computed(),
                tokens: s.tokens,
                end,
            };
            self.push(seq.id, start, phase);
        }
    }

    /// A verify step of `seq_id` (see [`RequestPhase::Verified`]).
    pub fn verified(
        &mut self,
        seq_id: usize,
        drafted: usize,
        accepted: usize,
        blocks_freed: usize,
    ) {
        let step = self.steps_run + 1;
        let phase = RequestPhase::Verified {
            step,
            drafted,
            accepted,
            blocks_freed,
        };
        self.push(seq_id, Instant::now(), phase);
    }

    pub fn first_token(&mut self, seq_id: usize) {
        self.push(seq_id, Instant::now(), RequestPhase::FirstToken);
    }

    /// A step ended: count it, keep its record, trace it.
    /// `times`: the step's start, then the ends of its schedule, forward and sample phases.
    pub fn step(&mut self, r: &StepRecord, pool: &KvPool, times: [Instant; 4], sampled: usize) {
        let [start, scheduled, forwarded, end] = times;
        self.steps_run += 1;
        self.generated_tokens += sampled as u64;
        self.step_time += end - start;
        if self.recent_steps.len() == RECENT_STEPS {
            self.recent_steps.pop_front();
        }
        self.recent_steps.push_back(*r);
        if let Some(t) = &mut self.trace {
            let block_bytes = pool.block_bytes() as u64;
            t.push(TraceEvent::Step(StepTrace {
                step: r.step,
                start,
                schedule: scheduled - start,
                forward: forwarded - scheduled,
                sample: end - forwarded,
                batch_size: r.batch_size,
                decode_seqs: r.decode_seqs,
                prefill_seqs: r.batch_size - r.decode_seqs,
                tokens: r.tokens,
                prefill_tokens: r.prefill_tokens,
                blocks_used: r.blocks_used,
                blocks_cached: r.blocks_cached,
                bytes_allocated: pool.bytes_allocated(),
                bytes_held: r.blocks_used as u64 * block_bytes,
            }));
        }
    }

    /// A request ended in step `self.steps_run + 1` (or between steps, for an abort).
    pub fn finished(&mut self, f: &Finished) {
        self.requests_finished += 1;
        let g = &f.generation;
        self.push(
            f.seq_id,
            Instant::now(),
            RequestPhase::Finished {
                reason: g.finish_reason,
                generated_tokens: g.tokens.len(),
            },
        );
        if self.recent_finished.len() == RECENT_FINISHED {
            self.recent_finished.pop_front();
        }
        let s = &g.stats;
        self.recent_finished.push_back(FinishedSummary {
            id: f.seq_id,
            step: self.steps_run + 1,
            finish_reason: g.finish_reason.state_name(),
            prompt_tokens: s.prompt_tokens,
            cached_tokens: f.cached_prompt_tokens,
            generated_tokens: g.tokens.len(),
            ttft_ms: s.ttft_ms,
            tpot_ms: s.tpot_ms,
            itl_ms: g.steps.iter().skip(1).map(|e| e.latency_ms).collect(),
            e2el_ms: s.e2el_ms,
            preemptions: f.preemptions,
            peak_blocks: f.peak_blocks,
        });
    }
}
