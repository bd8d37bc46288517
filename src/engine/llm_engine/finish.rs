//! Ending requests in [`LlmEngine`]: a sequence's stats when it finishes, and aborts (a
//! client gone, Ctrl-C). Its blocks go back to the pool; prompt blocks stay in the prefix
//! cache until evicted.
use super::LlmEngine;
use crate::engine::generate::kv_stats_of;
use crate::engine::sequence::Sequence;
use crate::engine::step_output::Finished;
use crate::engine::{DecodeMode, FinishReason, Generation, GenerationStats};
use anyhow::Result;
use std::time::Duration;

impl LlmEngine<'_> {
    /// End `seq` for `reason`: its stats, then its blocks go back to the pool (prompt blocks
    /// stay in the prefix cache until evicted).
    pub(super) fn finish(&mut self, mut seq: Sequence, reason: FinishReason) -> Finished {
        let most = (seq.num_prompt.saturating_add(seq.request.max_new_tokens))
            .min(self.config.max_model_len);
        let kv = kv_stats_of(&self.pool, &seq.table, most, self.config.max_model_len);
        seq.table.release(&mut self.pool);
        self.release_draft(&mut seq);
        let prefill = match (seq.first_scheduled, seq.output.token_times.first()) {
            (Some(s), Some(&t)) => (seq.arrival + t).saturating_duration_since(s),
            _ => Duration::ZERO,
        };
        let stats = GenerationStats::from_timings(
            DecodeMode::KvCache,
            seq.num_prompt,
            prefill,
            &seq.output.token_times,
            kv,
        );
        let f = Finished {
            seq_id: seq.id,
            generation: Generation {
                tokens: seq.tokens[seq.num_prompt..].to_vec(),
                text: seq.output.text,
                steps: seq.output.steps,
                finish_reason: reason,
                stats,
            },
            cached_prompt_tokens: seq.cached_prompt_tokens,
            preemptions: seq.preemptions,
            peak_blocks: seq.peak_blocks,
            error: None,
            spec: seq.spec,
        };
        self.record.finished(&f);
        f
    }

    /// End request `seq_id` now (its client went away): finish reason `interrupted`, the
    /// stats so far, and its blocks back to the pool (prompt blocks stay in the prefix
    /// cache). `None` when no unfinished request has that id.
    ///
    /// Errors: detokenizing its held-back text fails.
    pub fn abort(&mut self, seq_id: usize) -> Result<Option<Finished>> {
        let Some(mut seq) = self.scheduler.remove(seq_id) else {
            return Ok(None);
        };
        seq.output.flush(self.tokenizer)?;
        Ok(Some(self.finish(seq, FinishReason::Interrupted)))
    }

    /// End every unfinished request now (Ctrl-C): each gets finish reason `interrupted` and
    /// the stats so far; every block goes back to the pool.
    pub fn abort_all(&mut self) -> Result<Vec<Finished>> {
        let mut out = Vec::new();
        for mut seq in self.scheduler.drain() {
            seq.output.flush(self.tokenizer)?;
            out.push(self.finish(seq, FinishReason::Interrupted));
        }
        out.sort_by_key(|f| f.seq_id);
        Ok(out)
    }
}
