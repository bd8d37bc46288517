//! [`SpecRun`]: `generate --spec`'s decode loop — the last token and its drafts in one
//! multi-row pass, rows accepted in order while they agree, the rest rolled back.
use crate::engine::accept::accept_rows;
use crate::engine::accept::{Acceptor, Turn};
use crate::engine::sampling::rejection::DraftRng;
use crate::engine::spec::draft::{draft_batch, DraftJob, DraftSeq, Drafted};
use crate::engine::spec::{Acceptance, BatchShape, SpecReport, Speculative, VerifyCost};
use crate::engine::{FinishReason, SamplingParams, StepEvent};
use crate::kv::{KvCache, KvPool};
use crate::model::Decoder;
use anyhow::Result;
use std::time::Instant;

/// A draft model's side of the one-request loop: the model, its own pool and the
/// sequence's cache and generator in it.
pub(super) struct GenDraft<'a> {
    pub(super) decoder: &'a Decoder,
    pub(super) pool: KvPool,
    pub(super) seq: DraftSeq,
}

/// The one-request loop's speculative decode: each step runs the last sampled token and its
/// drafts as one multi-row pass on the decode kernels (R1), accepts row by row while the
/// sample equals the draft (as the batched engine's verify step does), and truncates the
/// cache to the rows whose inputs were kept.
pub(super) struct SpecRun<'a, 't> {
    pub(super) decoder: &'a Decoder,
    pub(super) spec: &'a Speculative,
    pub(super) turn: &'a Turn<'t>,
    pub(super) sampling: &'a SamplingParams,
    pub(super) max_new_tokens: usize,
    pub(super) acceptance: Acceptance,
    pub(super) cost: VerifyCost,
    pub(super) report: &'a mut SpecReport,
    pub(super) draft: Option<GenDraft<'a>>,
}

impl SpecRun<'_, '_> {
    /// Decode until the request ends; `ids` ends with a sampled token not yet in `cache`.
    ///
    /// Errors: as [`Decoder::forward_verify`] and [`Acceptor::accept`]; a NaN in the logits;
    /// the draft model's forward pass.
    pub(super) fn decode(
        &mut self,
        output: &mut Acceptor,
        ids: &mut Vec<u32>,
        cache: &mut KvCache,
        on_step: &mut impl FnMut(&StepEvent) -> Result<()>,
    ) -> Result<FinishReason> {
        let vocab = self.decoder.config().vocab_size;
        let num_prompt = self.turn.num_prompt;
        let mut spare = DraftRng::new(0);
        let result = loop {
            let drafted = self.drafts(ids)?;
            let drafts = &drafted.tokens;
            let start = cache.len();
            let mut rows = vec![ids[ids.len() - 1]];
            rows.extend_from_slice(drafts);
            let t = Instant::now();
            let logits = self
                .decoder
                .forward_verify(&rows, start, num_prompt, cache)?;
            let elapsed = t.elapsed().as_secs_f64();
            self.report.step(rows.len(), elapsed * 1e3);
            let rng = self.draft.as_mut().map_or(&mut spare, |d| &mut d.seq.rng);
            let turn = self.turn;
            let verdict = accept_rows(&logits, vocab, drafts, &drafted.q, rng, |row| {
                output.accept(turn, ids, row, |ev| on_step(ev))
            })?;
            // Forward pass and sampling, as the batched engine times its steps.
            self.cost.record(rows.len(), t.elapsed().as_secs_f64());
            if let Some(e) = verdict.unsampleable {
                break Err(e);
            }
            let kept = verdict.kept;
            if !drafts.is_empty() {
                self.report.counts.record(drafts.len(), kept);
                self.acceptance.record(drafts.len(), kept);
            }
            // Rows 0 ..= kept had kept inputs; the rejected drafts' rows leave the cache (and
            // when the request ends on a kept draft, its row too: the cache then holds every
            // token but the last, as after plain decoding).
            cache.rollback((start + kept + 1).min(ids.len() - 1));
            if let Some(d) = &mut self.draft {
                d.seq.cut(&mut d.pool, cache.len());
            }
            if let Some(reason) = verdict.finish {
                break Ok(reason);
            }
        };
        if let Some(d) = &mut self.draft {
            d.seq.table.release(&mut d.pool);
        }
        result
    }

    /// This step's drafts for `ids`: none that reach the context window or past
    /// `max_new_tokens`; as many as the turn-down rule chooses unless forced.
    ///
    /// Errors: the draft model's forward pass.
    fn drafts(&mut self, ids: &[u32]) -> Result<Drafted> {
        let generated = ids.len() - self.turn.num_prompt;
        let limit = self
            .turn
            .max_len
            .saturating_sub(ids.len() + 1)
            .min(self.max_new_tokens.saturating_sub(generated + 1));
        // Prompt lookup's drafts exist before the rule weighs them; a draft model's are made
        // only when it says they pay.
        let mut tokens = match self.draft {
            None => self.spec.propose(ids, self.turn.num_prompt, limit),
            Some(_) => Vec::new(),
        };
        let available = if self.draft.is_some() {
            self.spec.k.min(limit)
        } else {
            tokens.len()
        };
        let catch_up = self
            .draft
            .as_ref()
            .map_or(0, |d| ids.len().saturating_sub(d.seq.table.len()));
        let n = self.spec.how_many(
            &mut self.acceptance,
            available,
            &mut BatchShape::default(),
            &self.cost,
            catch_up,
        );
        if n == 0 && available > 0 {
            self.report.turned_down_steps += 1;
        }
        let Some(draft) = &mut self.draft else {
            tokens.truncate(n);
            return Ok(Drafted {
                tokens,
                q: Vec::new(),
            });
        };
        if n == 0 {
            return Ok(Drafted::default());
        }
        let t = Instant::now();
        let mut jobs = [DraftJob {
            tokens: ids,
            num_prompt: self.turn.num_prompt,
            k: n,
            state: &mut draft.seq,
            sampling: self.sampling,
        }];
        let mut out = draft_batch(draft.decoder, &mut draft.pool, &mut jobs)?;
        self.cost.record_draft(out.rounds, out.seconds);
        self.cost
            .record_catch_up(out.catch_up_rows, out.catch_up_seconds);
        self.report.draft_ms += t.elapsed().as_secs_f64() * 1e3;
        self.report.draft_catch_up_ms += out.catch_up_seconds * 1e3;
        self.report.draft_catch_up_rows += out.catch_up_rows as u64;
        Ok(out.drafted.pop().unwrap_or_default())
    }
}
