//! [`LlmEngine::verify`]: the end of a speculative verify step — each row's token sampled in
//! order while it agrees with the draft, the agreeing rows committed, the rest rolled back.
use super::step::Ending;
use super::LlmEngine;
use crate::engine::accept::accept_rows;
use crate::engine::accept::Turn;
use crate::engine::sampling::rejection::DraftRng;
use crate::engine::scheduler::Scheduled;
use crate::engine::sequence::Sequence;
use crate::engine::step_output::{SeqEvent, StepOutput};
use crate::engine::FinishReason;
use crate::kv::BlockTable;
use anyhow::Result;
use std::sync::atomic::AtomicBool;

impl LlmEngine<'_> {
    /// Verify the drafts of the sequence `s` ran: `logits` holds `1 + drafts` rows
    /// (`[rows, vocab_size]`), row `i` predicting the token after the step's `i`-th input
    /// (the last sampled token, then each draft). Row by row, the token is accepted through
    /// the sequence's own sampler as a one-token step would, until it differs from the
    /// draft (or the request ends): every verify step yields 1 ..= drafts + 1 tokens. The
    /// rows whose inputs were kept are committed; the rejected drafts' rows leave the block
    /// table (whole blocks back to the pool; the last block's tail is overwritten by the
    /// next step). They were never filed in the prefix cache: only prompt blocks are.
    ///
    /// Errors: as [`crate::engine::accept::Acceptor::accept`].
    pub(super) fn verify(
        &mut self,
        s: &Scheduled,
        logits: Vec<f32>,
        interrupt: &AtomicBool,
        out: &mut StepOutput,
    ) -> Result<Option<Ending>> {
        let vocab = self.decoder.config().vocab_size;
        let max_len = self.config.max_model_len;
        let seq = &mut self.scheduler.running[s.index];
        let drafted = seq.num_drafts;
        let drafts = seq.tokens.split_off(seq.tokens.len() - drafted);
        seq.num_drafts = 0;
        let q = std::mem::take(&mut seq.draft_q);
        let mut spare = DraftRng::new(0);
        let (id, tokenizer, events) = (seq.id, self.tokenizer, &mut out.events);
        let Sequence {
            output,
            tokens,
            draft,
            arrival,
            num_prompt,
            ..
        } = seq;
        let rng = draft.as_mut().map_or(&mut spare, |d| &mut d.rng);
        let turn = Turn {
            tokenizer,
            origin: *arrival,
            num_prompt: *num_prompt,
            max_len,
            interrupt,
        };
        let verdict = accept_rows(&logits, vocab, &drafts, &q, rng, |row| {
            output.accept(&turn, tokens, row, |step| {
                events.push(SeqEvent {
                    seq_id: id,
                    step: step.clone(),
                });
                Ok(())
            })
        })?;
        let kept = verdict.kept;
        let ending = match (verdict.finish, verdict.unsampleable) {
            (_, Some(e)) => Some((s.index, FinishReason::Error, Some(format!("{e:#}")))),
            (Some(reason), None) => Some((s.index, reason, None)),
            (None, None) => None,
        };
        seq.spec.record(drafted, kept);
        seq.acceptance.record(drafted, kept);
        self.spec_stats.record(drafted, kept);
        if let Some(side) = self
            .draft
            .as_mut()
            .filter(|_| seq.speculative.is_some_and(|s| s.uses_draft_model()))
        {
            side.record.record(drafted, kept);
        }
        // Rows 0 ..= kept had kept inputs; the drafts' rows after them are rolled back.
        let rows = Scheduled {
            index: s.index,
            tokens: kept + 1,
        };
        let caching = self.config.scheduler.enable_prefix_caching;
        let bs = self.pool.block_size();
        let seq = self.scheduler.commit(&rows, &mut self.pool, caching);
        let keep = BlockTable::blocks_for(seq.num_computed(), bs);
        let before = seq.table.num_blocks();
        seq.table.truncate_blocks(&mut self.pool, keep);
        let (id, freed) = (seq.id, before - seq.table.num_blocks());
        self.record.verified(id, drafted, kept, freed);
        self.cut_draft(s.index);
        Ok(ending)
    }
}
