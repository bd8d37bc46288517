//! The engine's draft model at work (`--spec draft`): the drafting run before each step is
//! scheduled, and its blocks given back ([`super::draft_side`] holds the model and pool).
use super::LlmEngine;
use crate::engine::sequence::Sequence;
use crate::engine::spec::draft::{draft_batch, DraftJob, DraftSeq};
use anyhow::Result;

impl LlmEngine<'_> {
    /// Blocks of the draft model's pool in use, and its size in blocks; None without a
    /// draft model.
    pub fn draft_blocks(&self) -> Option<(usize, usize)> {
        self.draft
            .as_ref()
            .map(|d| (d.pool.num_used_blocks(), d.pool.max_blocks()))
    }

    /// Before scheduling: every decoding sequence that speculates with the draft model gets
    /// its proposal for this step (as many drafts as the turn-down rule chooses, or all
    /// `k` when forced), the draft model running them as batched rounds.
    ///
    /// Errors: the draft model's forward pass fails.
    pub(super) fn propose_drafts(&mut self) -> Result<()> {
        let Some(side) = &mut self.draft else {
            return Ok(());
        };
        let mut batch = crate::engine::spec::BatchShape::new(
            self.scheduler
                .running
                .iter()
                .map(|s| s.acceptance.last_choice()),
        );
        let max_len = self.config.max_model_len;
        let cost = &self.scheduler.verify_cost;
        let mut jobs = Vec::new();
        let mut which = Vec::new();
        for (i, seq) in self.scheduler.running.iter_mut().enumerate() {
            let Some(spec) = seq.speculative.filter(|s| s.uses_draft_model()) else {
                continue;
            };
            if !seq.is_decoding() {
                crate::engine::spec::Speculative::skip(&mut seq.acceptance, &mut batch);
                continue;
            }
            let remaining = seq
                .request
                .max_new_tokens
                .saturating_sub(seq.num_generated());
            let limit = spec
                .k
                .min(max_len.saturating_sub(seq.tokens.len() + 1))
                .min(remaining.saturating_sub(1));
            seq.acceptance.seed_from(&side.record);
            let seen = seq.draft.as_ref().map_or(0, |d| d.table.len());
            let catch_up = seq.tokens.len().saturating_sub(seen);
            let n = spec.how_many(&mut seq.acceptance, limit, &mut batch, cost, catch_up);
            if n == 0 {
                continue;
            }
            let Sequence {
                tokens,
                num_prompt,
                draft,
                request,
                ..
            } = seq;
            jobs.push(DraftJob {
                tokens,
                num_prompt: *num_prompt,
                k: n,
                state: draft.get_or_insert_with(|| DraftSeq::new(request.sampling.seed)),
                sampling: &request.sampling,
            });
            which.push(i);
        }
        if jobs.is_empty() {
            return Ok(());
        }
        let outcome = draft_batch(side.decoder, &mut side.pool, &mut jobs)?;
        drop(jobs);
        self.scheduler
            .verify_cost
            .record_draft(outcome.rounds, outcome.seconds);
        self.scheduler
            .verify_cost
            .record_catch_up(outcome.catch_up_rows, outcome.catch_up_seconds);
        for (i, d) in which.into_iter().zip(outcome.drafted) {
            self.scheduler.running[i].draft_next = d;
        }
        Ok(())
    }

    /// Give `seq`'s draft-model blocks back (it finished or was aborted).
    pub(super) fn release_draft(&mut self, seq: &mut Sequence) {
        if let (Some(side), Some(d)) = (&mut self.draft, &mut seq.draft) {
            d.table.release(&mut side.pool);
        }
    }

    /// Cut `seq`'s draft cache back to the rows the target kept (after a verify step).
    pub(super) fn cut_draft(&mut self, index: usize) {
        let seq = &mut self.scheduler.running[index];
        if let (Some(side), Some(d)) = (&mut self.draft, &mut seq.draft) {
            d.cut(&mut side.pool, seq.table.len());
        }
    }
}
