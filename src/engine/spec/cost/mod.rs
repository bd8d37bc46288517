//! [`VerifyCost`]: what a verify step's extra rows cost on this machine, fitted from the
//! engine's own decode steps (step time against rows), for the turn-down rule.

mod steps;

use steps::Steps;

/// Cost of one more row in a decode step, relative to a one-row step's fixed part, used
/// until the engine has timed steps of different sizes. Measured on the default model on a
/// 2-core Xeon VM (`bench --spec-synth-rates 0`: a 17-row step ~4.9× a one-row step).
pub const PRIOR_ROW_COST: f64 = 0.25;

/// A draft model's catch-up row (a prefill row: the prompt, tokens it missed while idle)
/// relative to a one-row decode step of the same model, until one is timed: SmolLM2 prefills
/// at ~1,000 tokens/s where it decodes one at ~7.5 ms (README, 2-core machine): 0.13.
pub const PRIOR_CATCH_UP_ROW: f64 = 0.13;

/// Most of a sequence's share of decoding time that catching a draft model up may take
/// (5%, the slowdown the rule allows where drafting does not pay): a draft whose catch-up
/// costs more is not run over a stretch it missed, so it is not probed.
pub const CATCH_UP_SHARE: f64 = 0.05;

/// Steps a size must have been timed before its mean prices it: one step slowed by a
/// neighbour on the machine (3× its size's time is common on a shared VM) must not price a
/// size for good, since a size priced too dear is not run again and so never re-timed.
pub const MIN_SAMPLES: u32 = 3;

/// Weight a bucket's mean keeps when a step of its size is timed again (about the last
/// five steps of that size).
const DECAY: f64 = 0.8;

/// A line `seconds = a + b · rows` fitted over the mean step time of each step size seen.
/// A size counts once however often it recurs, so a batch that keeps stepping at one size
/// (eight sequences drafting four tokens each: 40 rows) still weighs the smaller steps it
/// took before (its probes, its plain steps) and the slope stays measured.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyCost {
    /// Per step size (rows), the decayed mean time in seconds and the steps timed.
    sizes: std::collections::BTreeMap<usize, (f64, u32)>,
    /// `b / a` when too few sizes have been timed.
    prior: f64,
    /// Seconds per draft-model round (one batched row per drafting sequence), decayed
    /// mean; 0 until one is timed (prompt lookup has none).
    draft_round: f64,
    /// Before a draft round is timed: its time relative to a one-row step of the target
    /// (the draft's weight bytes over the target's: decode reads every weight once); 0 for
    /// prompt lookup.
    draft_prior: f64,
    /// Seconds per catch-up row of the draft model, decayed mean; 0 until one is timed.
    catch_up_row: f64,
}

impl Default for VerifyCost {
    fn default() -> Self {
        VerifyCost::with_row_cost(PRIOR_ROW_COST)
    }
}

impl VerifyCost {
    /// No timed step yet; `row_cost` (`b / a`) until there are.
    pub fn with_row_cost(row_cost: f64) -> VerifyCost {
        VerifyCost {
            sizes: std::collections::BTreeMap::new(),
            prior: row_cost,
            draft_round: 0.0,
            draft_prior: 0.0,
            catch_up_row: 0.0,
        }
    }

    /// The default cost, with a draft model's prior (its decode bytes over `target`'s)
    /// when there is one.
    pub fn for_draft(
        target: &crate::model::Decoder,
        draft: Option<&crate::model::Decoder>,
    ) -> VerifyCost {
        let mut c = VerifyCost::default();
        if let Some(d) = draft {
            c.set_draft_prior(
                super::draft::decode_bytes(d) as f64
                    / super::draft::decode_bytes(target).max(1) as f64,
            );
        }
        c
    }

    /// A draft model runs each round in about `relative` of a one-row target step, until
    /// rounds are timed (the engine sets its weight bytes over the target's).
    pub fn set_draft_prior(&mut self, relative: f64) {
        if relative.is_finite() && relative > 0.0 {
            self.draft_prior = relative;
        }
    }

    /// Seconds per draft round: as timed, or before that the prior times a one-row step
    /// (`one_row`, seconds).
    fn draft_seconds(&self, one_row: f64) -> f64 {
        if self.draft_round > 0.0 {
            self.draft_round
        } else {
            self.draft_prior * one_row
        }
    }

    /// Time a draft model's drafting: `rounds` batched rounds in `seconds` (rounds that
    /// also caught the draft up over a longer stretch are timed apart, as catch-up).
    pub fn record_draft(&mut self, rounds: usize, seconds: f64) {
        decay_into(&mut self.draft_round, rounds, seconds);
    }

    /// The step sizes that price steps, with their mean times: those timed
    /// [`MIN_SAMPLES`] times or more, or every size timed while none has been.
    fn steps(&self) -> Steps {
        let trusted = self.sizes.values().any(|&(_, n)| n >= MIN_SAMPLES);
        Steps::new(
            self.sizes
                .iter()
                .filter(|(_, &(_, n))| !trusted || n >= MIN_SAMPLES)
                .map(|(&x, &(y, _))| (x, y))
                .collect(),
            self.prior,
        )
    }

    /// Estimated seconds of a decode step of `rows` rows (≥ 1), None before any step was
    /// timed: each size priced by what steps of that size measured (`Steps::time`: interpolated between measured sizes, never below a smaller one).
    pub fn time(&self, rows: usize) -> Option<f64> {
        self.steps().time(rows)
    }

    /// Time a draft model's catch-up: `rows` prefill rows in `seconds`.
    pub fn record_catch_up(&mut self, rows: usize, seconds: f64) {
        decay_into(&mut self.catch_up_row, rows, seconds);
    }

    /// Whether a draft model may catch up over a stretch it missed, in a step of `shape`: a
    /// catch-up row must cost at most [`CATCH_UP_SHARE`] of a sequence's share of a step
    /// (the step's time over its sequences), since every stretch caught up was decoded at
    /// that price. Before anything is timed, the priors: a draft round at its weight bytes
    /// over the target's, a catch-up row at [`PRIOR_CATCH_UP_ROW`] of a round.
    pub fn catch_up_pays(&self, shape: super::StepShape) -> bool {
        let seqs = shape.seqs.max(1) as f64;
        let steps = self.steps();
        match (steps.time(shape.rows), steps.time(1)) {
            (Some(step), Some(one)) => {
                let row = if self.catch_up_row > 0.0 {
                    self.catch_up_row
                } else {
                    PRIOR_CATCH_UP_ROW * self.draft_seconds(one)
                };
                row <= CATCH_UP_SHARE * step / seqs
            }
            // In units of a one-row step's fixed part.
            _ => {
                let r = self.prior;
                let step = 1.0 + r * shape.rows.max(1) as f64;
                PRIOR_CATCH_UP_ROW * self.draft_prior * (1.0 + r) <= CATCH_UP_SHARE * step / seqs
            }
        }
    }

    /// Time one decode-only step (no prompt rows): `rows` rows in `seconds` of forward pass
    /// and sampling.
    pub fn record(&mut self, rows: usize, seconds: f64) {
        if rows == 0 || !seconds.is_finite() || seconds <= 0.0 {
            return;
        }
        self.sizes
            .entry(rows)
            .and_modify(|(m, n)| {
                *m = *m * DECAY + seconds * (1.0 - DECAY);
                *n = n.saturating_add(1);
            })
            .or_insert((seconds, 1));
    }

    /// A step of `base_rows + n` rows against one of `base_rows` rows, in time (≥ 1), with
    /// `n` draft-model rounds when one drafts (shared by the step's `base_rows` rows: their
    /// drafts run in the same rounds). Each size as [`Self::time`] prices it; before any
    /// step was timed, the prior line.
    pub fn ratio(&self, base_rows: usize, n: usize) -> f64 {
        let base = base_rows.max(1);
        let steps = self.steps();
        let (Some(t0), Some(t1), Some(one)) =
            (steps.time(base), steps.time(base + n), steps.time(1))
        else {
            // In units of a one-row step's fixed part, which is 1 / (1 + prior) of it.
            let r = self.prior;
            let drafting = n as f64 * self.draft_prior * (1.0 + r) / base as f64;
            return (1.0 + r * (base + n) as f64 + drafting) / (1.0 + r * base as f64);
        };
        let drafting = n as f64 * self.draft_seconds(one) / base as f64;
        ((t1 + drafting) / t0).max(1.0)
    }
}

/// Fold `seconds` over `n` units into the decayed mean `mean` (0: none yet, the first
/// measurement taken whole); nothing for no units or a time that is not positive.
fn decay_into(mean: &mut f64, n: usize, seconds: f64) {
    if n == 0 || !seconds.is_finite() || seconds <= 0.0 {
        return;
    }
    let per = seconds / n as f64;
    *mean = if *mean == 0.0 {
        per
    } else {
        *mean * DECAY + per * (1.0 - DECAY)
    };
}

#[cfg(test)]
mod tests;
