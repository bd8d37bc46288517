//! [`Acceptance`]: a sequence's recent acceptance per draft position, and the rule that turns
//! speculation down where it does not pay: each step drafts the number of tokens that
//! maximizes the expected tokens per unit of step time, none when no number beats plain
//! decoding, with a probe now and then so a sequence that starts copying is noticed.
use super::cost::VerifyCost;
use super::MAX_SPEC_TOKENS;

/// Weight a verify step's outcome keeps per later verify step: the estimate follows about
/// the last ten steps, so a sequence that stops copying its input is turned down quickly.
pub const DECAY: f64 = 0.9;

/// After this many steps the rule turned down in a row (times the rows of the step: in a
/// batch each probe slows every sequence's step), one step verifies a single draft (a
/// probe): at most one extra row per 17 rows stepped, about 1% of the time on the default
/// model.
pub const PROBE_EVERY: u32 = 16;

/// The wait between probes doubles with each probe that finds drafting still does not pay,
/// up to this factor (probes every 256 × rows steps): a draft model's probe also runs the
/// draft over every token it missed, so a sequence that never pays must not keep paying it.
pub const MAX_PROBE_BACKOFF: u32 = 16;

/// A draft length must beat plain decoding's tokens per second by this factor to be chosen
/// (2%), so that estimates within noise of break-even do not flap between the two.
pub const MARGIN: f64 = 1.02;

/// Pseudo-observations behind each position's prior.
const PRIOR_WEIGHT: f64 = 0.5;

/// Recent verify outcomes of one sequence, as decayed counts per draft position.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Acceptance {
    /// Per position `p`: verify steps that drafted a token at `p` (decayed).
    drafted: [f64; MAX_SPEC_TOKENS],
    /// Per position `p`: verify steps whose drafts `0 ..= p` were all accepted (decayed).
    accepted: [f64; MAX_SPEC_TOKENS],
    /// Steps in a row the rule turned down.
    turned_down: u32,
    /// Probes since the rule last chose to draft: each one that does not bring drafting
    /// back doubles the wait before the next ([`MAX_PROBE_BACKOFF`] at most).
    failed_probes: u32,
}

impl Acceptance {
    /// Count one verify step that drafted `drafted` tokens and kept the first `accepted`.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        for p in 0..MAX_SPEC_TOKENS {
            self.drafted[p] *= DECAY;
            self.accepted[p] *= DECAY;
            if p < drafted {
                self.drafted[p] += 1.0;
                self.accepted[p] += f64::from(u8::from(p < accepted));
            }
        }
    }

    /// Estimated probability that drafts `0 ..= p` are all accepted, non-increasing in `p`.
    /// Each position starts from the one before it (a fresh sequence: 1, so it drafts) and
    /// moves toward its observed rate as counts accumulate (half a pseudo-observation: one
    /// rejected first draft takes it to 1/3, ten to 5%).
    pub fn prefix_rate(&self, p: usize) -> f64 {
        let mut rate = 1.0;
        for q in 0..=p.min(MAX_SPEC_TOKENS - 1) {
            let observed =
                (self.accepted[q] + PRIOR_WEIGHT * rate) / (self.drafted[q] + PRIOR_WEIGHT);
            rate = observed.min(rate);
        }
        rate
    }

    /// Expected tokens a verify step with `n` drafts yields: the one sampled token plus each
    /// draft position's prefix acceptance.
    pub fn expected_tokens(&self, n: usize) -> f64 {
        1.0 + (0..n).map(|p| self.prefix_rate(p)).sum::<f64>()
    }

    /// How many of `available` draft tokens to verify this step, in a step that otherwise
    /// runs `base_rows` rows (this sequence's own row included) at the measured `cost`: the
    /// `n` that maximizes the step's tokens per second, `(base_rows − 1 + E(n))` over
    /// `t(base_rows + n)`, if it beats plain decoding's by [`MARGIN`]; else 0, except after
    /// [`PROBE_EVERY`] · `base_rows` turned-down steps, which verify one draft. A sequence's
    /// first verify step is such a probe too (one draft), so a batch of fresh sequences
    /// that do not copy costs one row each, not k.
    pub fn choose(&mut self, available: usize, base_rows: usize, cost: &VerifyCost) -> usize {
        if available == 0 {
            return 0;
        }
        if self.drafted[0] == 0.0 {
            return 1;
        }
        let base = base_rows.max(1) as f64;
        let (mut best, mut best_gain) = (0, MARGIN);
        for n in 1..=available.min(MAX_SPEC_TOKENS) {
            let tokens = (base - 1.0 + self.expected_tokens(n)) / base;
            let gain = tokens / cost.ratio(base_rows.max(1), n);
            if gain > best_gain {
                (best, best_gain) = (n, gain);
            }
        }
        if best > 0 {
            self.turned_down = 0;
            self.failed_probes = 0;
            return best;
        }
        self.turned_down += 1;
        let rows = u32::try_from(base_rows.max(1)).unwrap_or(u32::MAX);
        let backoff = 1u32 << self.failed_probes.min(MAX_PROBE_BACKOFF.trailing_zeros());
        if self.turned_down > PROBE_EVERY.saturating_mul(rows).saturating_mul(backoff) {
            self.turned_down = 0;
            self.failed_probes += 1;
            return 1;
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(row_cost: f64) -> VerifyCost {
        VerifyCost::with_row_cost(row_cost)
    }

    #[test]
    fn a_fresh_sequence_probes_with_one_draft_then_drafts_what_pays() {
        let mut a = Acceptance::default();
        assert_eq!(a.prefix_rate(0), 1.0);
        assert_eq!(a.choose(4, 1, &cost(0.05)), 1);
        a.record(1, 1);
        assert_eq!(a.choose(4, 1, &cost(0.05)), 4);
    }

    #[test]
    fn rejections_turn_it_down_and_probes_come_back() {
        let mut a = Acceptance::default();
        for _ in 0..20 {
            a.record(4, 0);
        }
        assert!(a.prefix_rate(0) < 0.15, "{}", a.prefix_rate(0));
        let c = cost(0.05);
        // Probes after 16 turned-down steps, then 32, 64 … (each failed probe doubles the
        // wait; recording nothing keeps the estimate low).
        let choices: Vec<usize> = (0..400).map(|_| a.choose(4, 1, &c)).collect();
        assert!(choices.iter().all(|&n| n == 0 || n == 1));
        let probes: Vec<usize> = (0..choices.len()).filter(|&i| choices[i] == 1).collect();
        let p = PROBE_EVERY as usize;
        assert_eq!(
            probes,
            vec![p, 2 * p + p + 1, 6 * p + p + 2, 14 * p + p + 3],
            "{probes:?}"
        );
        // In a batch of 8 rows the wait is 8 times longer.
        let mut b = Acceptance::default();
        for _ in 0..20 {
            b.record(4, 0);
        }
        let choices: Vec<usize> = (0..8 * (PROBE_EVERY as usize + 1))
            .map(|_| b.choose(4, 8, &c))
            .collect();
        assert!(
            choices.iter().filter(|&&n| n == 1).count() <= 1,
            "{choices:?}"
        );
        // A probe that brings drafting back resets the wait.
        let mut good = Acceptance::default();
        for _ in 0..20 {
            good.record(4, 4);
        }
        assert_eq!(good.choose(4, 1, &c), 4);
        assert_eq!(good.failed_probes, 0);
    }

    #[test]
    fn good_acceptance_keeps_the_full_draft_and_cheap_rows_draft_more() {
        let mut a = Acceptance::default();
        for _ in 0..20 {
            a.record(4, 3);
        }
        // Positions 0..3 always accepted, position 3 never: 3 drafts pay, the 4th does not.
        assert_eq!(a.choose(4, 1, &cost(0.05)), 3);
        // Half the first drafts accepted: worth one row at 5%, not when a row costs 3× the fixed part.
        let mut b = Acceptance::default();
        for i in 0..40 {
            b.record(1, i % 2);
        }
        assert_eq!(b.choose(1, 1, &cost(0.05)), 1);
        assert_eq!(b.choose(1, 1, &cost(3.0)), 0);
    }

    #[test]
    fn prefix_rates_never_increase_with_position() {
        let mut a = Acceptance::default();
        a.record(2, 0);
        a.record(6, 6);
        for p in 1..MAX_SPEC_TOKENS {
            assert!(a.prefix_rate(p) <= a.prefix_rate(p - 1));
        }
    }
}
