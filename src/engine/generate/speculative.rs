//! [`SpecRun`]: `generate --spec`'s decode loop — the last token and its drafts in one
//! multi-row pass, rows accepted in order while they agree, the rest rolled back.
use crate::engine::accept::{Accepted, Acceptor, Logits, Turn};
use crate::engine::spec::{Acceptance, SpecReport, Speculative, VerifyCost};
use crate::engine::{FinishReason, StepEvent};
use crate::kv::KvCache;
use crate::model::Decoder;
use anyhow::Result;
use std::time::Instant;

/// The one-request loop's speculative decode: each step runs the last sampled token and its
/// drafts as one multi-row pass on the decode kernels (R1), accepts row by row while the
/// sample equals the draft (as the batched engine's verify step does), and truncates the
/// cache to the rows whose inputs were kept.
pub(super) struct SpecRun<'a, 't> {
    pub(super) decoder: &'a Decoder,
    pub(super) spec: &'a Speculative,
    pub(super) turn: &'a Turn<'t>,
    pub(super) max_new_tokens: usize,
    pub(super) acceptance: Acceptance,
    pub(super) cost: VerifyCost,
    pub(super) report: &'a mut SpecReport,
}

impl SpecRun<'_, '_> {
    /// Decode until the request ends; `ids` ends with a sampled token not yet in `cache`.
    ///
    /// Errors: as [`Decoder::forward_verify`] and [`Acceptor::accept`]; a NaN in the logits.
    pub(super) fn decode(
        &mut self,
        output: &mut Acceptor,
        ids: &mut Vec<u32>,
        cache: &mut KvCache,
        on_step: &mut impl FnMut(&StepEvent) -> Result<()>,
    ) -> Result<FinishReason> {
        let vocab = self.decoder.config().vocab_size;
        let num_prompt = self.turn.num_prompt;
        loop {
            let drafts = self.drafts(ids);
            let start = cache.len();
            let mut rows = vec![ids[ids.len() - 1]];
            rows.extend_from_slice(&drafts);
            let t = Instant::now();
            let logits = self
                .decoder
                .forward_verify(&rows, start, num_prompt, cache)?;
            let elapsed = t.elapsed().as_secs_f64();
            self.cost.record(rows.len(), elapsed);
            self.report.step(rows.len(), elapsed * 1e3);
            let mut kept = 0;
            let mut finish = None;
            for (row, chunk) in logits.chunks_exact(vocab).enumerate() {
                let accepted =
                    output.accept(self.turn, ids, Logits::Row(chunk.to_vec()), |ev| {
                        on_step(ev)
                    })?;
                let right = |token| row < drafts.len() && token == drafts[row];
                match accepted {
                    Accepted::Token {
                        token,
                        finish: None,
                    } if right(token) => kept += 1,
                    Accepted::Token { finish: None, .. } => break,
                    Accepted::Token {
                        token,
                        finish: Some(reason),
                    } => {
                        kept += usize::from(right(token));
                        finish = Some(reason);
                        break;
                    }
                    Accepted::Unsampleable(e) => return Err(e),
                }
            }
            if !drafts.is_empty() {
                self.report.counts.record(drafts.len(), kept);
                self.acceptance.record(drafts.len(), kept);
            }
            // Rows 0 ..= kept had kept inputs; the rejected drafts' rows leave the cache (and
            // when the request ends on a kept draft, its row too: the cache then holds every
            // token but the last, as after plain decoding).
            cache.rollback((start + kept + 1).min(ids.len() - 1));
            if let Some(reason) = finish {
                return Ok(reason);
            }
        }
    }

    /// This step's drafts for `ids`: none that reach the context window or past
    /// `max_new_tokens`; as many as the turn-down rule chooses unless forced.
    fn drafts(&mut self, ids: &[u32]) -> Vec<u32> {
        let generated = ids.len() - self.turn.num_prompt;
        let limit = self
            .turn
            .max_len
            .saturating_sub(ids.len() + 1)
            .min(self.max_new_tokens.saturating_sub(generated + 1));
        let mut drafts = self.spec.propose(ids, self.turn.num_prompt, limit);
        if !self.spec.force && !drafts.is_empty() {
            let n = self.acceptance.choose(drafts.len(), 1, &self.cost);
            if n == 0 {
                self.report.turned_down_steps += 1;
            }
            drafts.truncate(n);
        }
        drafts
    }
}
