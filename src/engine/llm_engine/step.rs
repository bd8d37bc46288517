//! [`LlmEngine::step`]: one engine step, read top to bottom as schedule → forward →
//! postprocess. The [`Scheduler`](crate::engine::scheduler::Scheduler) decides what runs and
//! owns the sequences; the decoder runs the batch; each sequence's token goes through the
//! same [`Acceptor`](crate::engine::accept::Acceptor) path as the one-request loop's.
use super::LlmEngine;
use crate::engine::accept::Accepted;
use crate::engine::scheduler::Scheduled;
use crate::engine::stats::ms;
use crate::engine::step_output::{SeqEvent, StepOutput, StepRecord};
use crate::engine::FinishReason;
use crate::model::SeqChunk;
use anyhow::{Context, Result};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// A sequence that ends this step: its index in the running queue, why it ends, and the
/// error of one that failed alone.
pub(super) type Ending = (usize, FinishReason, Option<String>);

impl LlmEngine<'_> {
    /// Run one step: schedule, one batched forward pass, sample. `interrupted` (Ctrl-C) ends
    /// every sequence that samples a token this step; see also [`Self::abort_all`].
    ///
    /// A request whose logits cannot be sampled (NaN from an overflow) ends alone, with
    /// [`FinishReason::Error`] and the reason in
    /// [`Finished::error`](crate::engine::step_output::Finished::error); the others go on.
    ///
    /// Errors: a forward-pass failure (the engine should then be dropped).
    pub fn step(&mut self, interrupted: bool) -> Result<StepOutput> {
        let t0 = Instant::now();
        self.propose_drafts()?;
        let plan = self.schedule();
        if plan.is_empty() {
            return Ok(StepOutput::default());
        }
        let t1 = Instant::now();
        self.record.scheduled(&self.scheduler, t1);
        let (prefill_seqs, prefill_tokens) = self.prefill_share(&plan);
        let logits = self.forward(&plan)?;
        // The step's peak: every block reserved for it is held until verification gives
        // back the rejected drafts' blocks.
        self.peak_blocks_used = self.peak_blocks_used.max(self.pool.num_used_blocks());
        let t2 = Instant::now();
        let spec_before = (
            self.spec_stats.num_draft_tokens,
            self.spec_stats.num_accepted_tokens,
        );
        let (out, done) = self.postprocess(&plan, logits, interrupted, t0, t2)?;
        if prefill_seqs == 0 {
            // The forward pass and the rows' sampling (a 262k-token vocabulary's rows cost
            // more than their GEMV share): what one more row adds to a step. The draft
            // model's time before the schedule is priced apart (`record_draft`).
            let rows = plan.iter().map(|s| s.tokens).sum();
            let seconds = (Instant::now() - t1).as_secs_f64();
            self.scheduler.verify_cost.record(rows, seconds);
        }
        // What the sequences hold after the step (the step record's blocks_used).
        let used = self.pool.num_used_blocks();
        self.peak_blocks_used = self.peak_blocks_used.max(used);
        let out = self.finish_all(out, done);
        let t3 = Instant::now();
        let record = StepRecord {
            step: self.record.steps_run + 1,
            batch_size: plan.len(),
            decode_seqs: plan.len() - prefill_seqs,
            tokens: plan.iter().map(|s| s.tokens).sum(),
            prefill_tokens,
            ms: ms(t3 - t0),
            schedule_ms: ms(t1 - t0),
            forward_ms: ms(t2 - t1),
            sample_ms: ms(t3 - t2),
            blocks_used: used,
            blocks_cached: self.pool.num_cached_free_blocks(),
            draft_tokens: (self.spec_stats.num_draft_tokens - spec_before.0) as usize,
            accepted_tokens: (self.spec_stats.num_accepted_tokens - spec_before.1) as usize,
        };
        self.record
            .step(&record, &self.pool, [t0, t1, t2, t3], out.events.len());
        if self.keep_steps {
            self.steps.push(record);
        }
        Ok(out)
    }

    /// Ask the scheduler what this step runs (taking blocks for it from the pool).
    fn schedule(&mut self) -> Vec<Scheduled> {
        self.scheduler
            .schedule(&self.config.scheduler, &mut self.pool)
    }

    /// Of `plan`, the sequences that run a prefill chunk and their tokens.
    fn prefill_share(&self, plan: &[Scheduled]) -> (usize, usize) {
        plan.iter()
            .filter(|s| self.scheduler.running[s.index].is_prefill(s.tokens))
            .fold((0, 0), |(n, t), s| (n + 1, t + s.tokens))
    }

    /// The batched forward pass for `plan`; per scheduled sequence, the logits of its last
    /// row when its chunk reaches the end of its tokens (else empty).
    fn forward(&mut self, plan: &[Scheduled]) -> Result<Vec<Vec<f32>>> {
        let running = &self.scheduler.running;
        let chunks: Vec<SeqChunk> = plan
            .iter()
            .map(|s| {
                let seq = &running[s.index];
                let start = seq.num_computed();
                let end = start + s.tokens;
                SeqChunk {
                    tokens: &seq.tokens[start..end],
                    start_pos: start,
                    prompt_end: seq.num_prompt,
                    table: &seq.table,
                    // A verify step needs every row's logits: the last token's and each draft's.
                    logits_from: if seq.num_drafts > 0 {
                        Some(0)
                    } else {
                        (end == seq.tokens.len()).then_some(s.tokens - 1)
                    },
                    observe: seq.evict.as_ref().map(|e| &e.log),
                    mask: None,
                }
            })
            .collect();
        self.decoder
            .forward_batch(&mut self.pool, &chunks)
            .context("batched forward pass")
    }

    /// After the forward pass (which ran from `start` to `end`): count and trace the prefill
    /// chunks, commit every sequence's new rows, and accept a token for each whose chunk
    /// reached its end. Returns the tokens sampled and the sequences that end.
    ///
    /// Errors: a token the tokenizer cannot decode.
    fn postprocess(
        &mut self,
        plan: &[Scheduled],
        logits: Vec<Vec<f32>>,
        interrupted: bool,
        start: Instant,
        end: Instant,
    ) -> Result<(StepOutput, Vec<Ending>)> {
        self.scheduler.count_prefill_chunks(plan);
        let config = &self.config.scheduler;
        self.record
            .chunks(&self.scheduler.running, plan, config, start, end);
        let vocab = self.decoder.config().vocab_size;
        let interrupt = AtomicBool::new(interrupted);
        let mut out = StepOutput::default();
        let mut done: Vec<Ending> = Vec::new();
        for (s, logits) in plan.iter().zip(logits) {
            if self.scheduler.running[s.index].num_drafts > 0 {
                if let Some(ending) = self.verify(s, logits, &interrupt, &mut out)? {
                    done.push(ending);
                }
                continue;
            }
            let caching = self.config.scheduler.enable_prefix_caching;
            let seq = self.scheduler.commit(s, &mut self.pool, caching);
            if logits.len() != vocab {
                continue; // a prefill chunk before the prompt's end
            }
            let (id, record, events) = (seq.id, &mut self.record, &mut out.events);
            let accepted = seq.accept(
                self.tokenizer,
                self.config.max_model_len,
                &interrupt,
                crate::engine::accept::Logits::Row(logits),
                |step| {
                    if step.index == 0 {
                        record.first_token(id);
                    }
                    events.push(SeqEvent {
                        seq_id: id,
                        step: step.clone(),
                    });
                    Ok(())
                },
            )?;
            match accepted {
                Accepted::Token { finish: None, .. } => {}
                Accepted::Token {
                    finish: Some(reason),
                    ..
                } => done.push((s.index, reason, None)),
                // A request whose logits cannot be sampled fails alone; the batch goes on.
                Accepted::Unsampleable(e) => {
                    done.push((s.index, FinishReason::Error, Some(format!("{e:#}"))))
                }
            }
        }
        Ok((out, done))
    }

    /// End the sequences in `done`: each leaves the running queue with its stats, and its
    /// blocks go back to the pool; `out.finished` lists them by sequence id.
    fn finish_all(&mut self, mut out: StepOutput, mut done: Vec<Ending>) -> StepOutput {
        // Highest index first keeps the others' indices valid.
        done.sort_by_key(|d| std::cmp::Reverse(d.0));
        for (index, reason, error) in done {
            let seq = self.scheduler.take_running(index);
            let mut f = self.finish(seq, reason);
            f.error = error;
            out.finished.push(f);
        }
        out.finished.sort_by_key(|f| f.seq_id);
        out
    }
}
