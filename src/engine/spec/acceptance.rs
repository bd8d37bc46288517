//! [`Acceptance`]: a sequence's recent acceptance per draft position, and the rule that turns
//! speculation down where it does not pay: each step drafts the number of tokens that
//! maximizes the expected tokens per unit of step time, none when no number beats plain
//! decoding, with a probe now and then so a sequence that starts copying is noticed.
use super::cost::VerifyCost;
use super::shape::StepShape;
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

/// Weight, in verify steps, of the engine-wide record a fresh sequence starts from
/// ([`Acceptance::seed_from`]): enough to skip a first probe the record says cannot pay,
/// little enough that the sequence's own steps take over within a few steps.
pub const SEED_WEIGHT: f64 = 2.0;

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
    /// The last step's choice: drafts, and the tokens beyond the first they were expected
    /// to yield (what the other sequences of a batch assume it drafts next).
    last: (usize, f64),
    /// Most failed probes before the sequence stops probing (None: no limit).
    probe_cap: Option<u32>,
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

    /// Stop probing after `n` probes that did not bring drafting back (a draft model's
    /// sequences: [`MAX_DRAFT_PROBES`](super::MAX_DRAFT_PROBES)).
    pub fn cap_probes(&mut self, n: u32) {
        self.probe_cap = Some(n);
    }

    /// A sequence that has not drafted yet starts from `record` (the engine's recent verify
    /// steps across sequences), weighted as [`SEED_WEIGHT`] steps, instead of probing: a
    /// draft model whose drafts have not paid for the sequences before it is then not run
    /// over this one's prompt. No effect once the sequence drafted, or with an empty record.
    pub fn seed_from(&mut self, record: &Acceptance) {
        if self.drafted[0] > 0.0 || record.drafted[0] <= 0.0 {
            return;
        }
        let scale = SEED_WEIGHT / record.drafted[0];
        for p in 0..MAX_SPEC_TOKENS {
            self.drafted[p] = record.drafted[p] * scale;
            self.accepted[p] = record.accepted[p] * scale;
        }
    }

    /// The last step's choice: drafts, and the tokens beyond the first they were expected
    /// to yield ((0, 0) when it did not draft).
    pub fn last_choice(&self) -> (usize, f64) {
        self.last
    }

    /// Note this step's choice of `n` drafts (0: none, or the sequence was not decoding).
    pub fn set_choice(&mut self, n: usize) {
        self.last = (n, self.expected_tokens(n) - 1.0);
    }

    /// How many of `available` draft tokens to verify this step, in a step of `shape`
    /// (other sequences' drafts included) at the measured `cost`: the `n` that maximizes
    /// the step's tokens per second, `(shape.tokens − 1 + E(n))` over `t(shape.rows + n)`,
    /// if it beats not drafting by [`MARGIN`]; else 0, except after [`PROBE_EVERY`] ·
    /// `shape.seqs` turned-down steps, which verify one draft. A sequence's first verify
    /// step is such a probe too (one draft), so a batch of fresh sequences that do not copy
    /// costs one row each, not k. Neither happens when not even drafts that are all
    /// accepted would pay at the step's price, nor while a draft model would first have to
    /// run over `catch_up` tokens it has not seen (0 for prompt lookup) at a price
    /// [`VerifyCost::catch_up_pays`] refuses.
    pub fn choose(
        &mut self,
        available: usize,
        shape: StepShape,
        cost: &VerifyCost,
        catch_up: usize,
    ) -> usize {
        if available == 0 {
            return 0;
        }
        // A draft model that missed a stretch (its first draft: the prompt) runs it first;
        // where that costs more than the rule allows, it is not drafted or probed at all.
        if catch_up > crate::engine::spec::draft::STEADY_FEED && !cost.catch_up_pays(shape) {
            return 0;
        }
        let plain = shape.tokens.max(1.0);
        let rows = shape.rows.max(1);
        let most = available.min(MAX_SPEC_TOKENS);
        // Not even drafts that are all accepted would pay at this step's price (a draft
        // model about as dear as the target, a batch whose steps are compute-bound): no
        // draft, and no probe to find out.
        // Each draft count's step time against a plain step, asked once: `ratio[n - 1]`.
        let mut ratio = [1.0; MAX_SPEC_TOKENS];
        for (i, r) in ratio.iter_mut().enumerate().take(most) {
            *r = cost.ratio(rows, i + 1);
        }
        let ratio = &ratio[..most];
        let could_pay = (1..=most).any(|n| (plain + n as f64) / plain / ratio[n - 1] > MARGIN);
        if !could_pay {
            return 0;
        }
        if self.drafted[0] == 0.0 {
            return 1;
        }
        let (mut best, mut best_gain) = (0, MARGIN);
        for (i, &r) in ratio.iter().enumerate() {
            let n = i + 1;
            let tokens = (plain - 1.0 + self.expected_tokens(n)) / plain;
            let gain = tokens / r;
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
        let seqs = u32::try_from(shape.seqs.max(1)).unwrap_or(u32::MAX);
        let backoff = 1u32 << self.failed_probes.min(MAX_PROBE_BACKOFF.trailing_zeros());
        let capped = self.probe_cap.is_some_and(|cap| self.failed_probes >= cap);
        if !capped && self.turned_down > PROBE_EVERY.saturating_mul(seqs).saturating_mul(backoff) {
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

    /// A step of `seqs` sequences that do not draft.
    fn plain(seqs: usize) -> StepShape {
        StepShape {
            seqs,
            rows: seqs,
            tokens: seqs as f64,
        }
    }

    #[test]
    fn a_fresh_sequence_probes_with_one_draft_then_drafts_what_pays() {
        let mut a = Acceptance::default();
        assert_eq!(a.prefix_rate(0), 1.0);
        assert_eq!(a.choose(4, plain(1), &cost(0.05), 0), 1);
        a.record(1, 1);
        assert_eq!(a.choose(4, plain(1), &cost(0.05), 0), 4);
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
        let choices: Vec<usize> = (0..400).map(|_| a.choose(4, plain(1), &c, 0)).collect();
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
            .map(|_| b.choose(4, plain(8), &c, 0))
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
        assert_eq!(good.choose(4, plain(1), &c, 0), 4);
        assert_eq!(good.failed_probes, 0);
    }

    #[test]
    fn good_acceptance_keeps_the_full_draft_and_cheap_rows_draft_more() {
        let mut a = Acceptance::default();
        for _ in 0..20 {
            a.record(4, 3);
        }
        // Positions 0..3 always accepted, position 3 never: 3 drafts pay, the 4th does not.
        assert_eq!(a.choose(4, plain(1), &cost(0.05), 0), 3);
        // Half the first drafts accepted: worth one row at 5%, not when a row costs 3× the fixed part.
        let mut b = Acceptance::default();
        for i in 0..40 {
            b.record(1, i % 2);
        }
        assert_eq!(b.choose(1, plain(1), &cost(0.05), 0), 1);
        assert_eq!(b.choose(1, plain(1), &cost(3.0), 0), 0);
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

    /// Priced at the step it joins: a sequence that accepts 90% drafts four tokens in a batch
    /// of eight that do not draft, and none when the others' drafts already took the step to
    /// a size that measured far above the line of the smaller ones.
    #[test]
    fn drafts_are_priced_at_the_step_the_batch_runs() {
        let mut c = VerifyCost::default();
        for rows in [8, 10, 12, 16] {
            c.record(rows, 0.010 + 0.001 * rows as f64);
        }
        c.record(40, 0.2);
        let mut a = Acceptance::default();
        for i in 0..40 {
            a.record(4, if i % 10 == 0 { 0 } else { 4 });
        }
        assert_eq!(a.choose(4, plain(8), &c, 0), 4);
        let crowded = StepShape {
            seqs: 8,
            rows: 36,
            tokens: 8.0 + 7.0 * 3.0,
        };
        assert_eq!(a.choose(4, crowded, &c, 0), 0);
    }

    /// A capped sequence stops probing after its failed probes; a fresh one seeded from a
    /// record of rejections does not probe first, one seeded from a good record drafts.
    #[test]
    fn capped_probes_and_seeded_starts() {
        let c = cost(0.05);
        let mut bad = Acceptance::default();
        for _ in 0..20 {
            bad.record(4, 0);
        }
        let mut a = bad.clone();
        a.cap_probes(2);
        let probes = (0..2000)
            .filter(|_| a.choose(4, plain(1), &c, 0) == 1)
            .count();
        assert_eq!(probes, 2);
        let mut fresh = Acceptance::default();
        fresh.seed_from(&bad);
        assert!((fresh.drafted[0] - SEED_WEIGHT).abs() < 1e-12);
        // A row at half a step's fixed part (a draft model's round): 20% does not pay.
        let dear = cost(0.5);
        assert_eq!(fresh.choose(4, plain(1), &dear, 0), 0);
        let mut good = Acceptance::default();
        for _ in 0..20 {
            good.record(4, 4);
        }
        let mut fresh = Acceptance::default();
        fresh.seed_from(&good);
        assert_eq!(fresh.choose(4, plain(1), &dear, 0), 4);
        // A sequence that drafted keeps its own counts.
        let mut own = Acceptance::default();
        own.record(4, 4);
        let before = own.clone();
        own.seed_from(&bad);
        assert_eq!(own, before);
    }

    /// When every draft accepted would still not pay (each row as dear as a whole step, a
    /// draft round as dear again), a fresh sequence does not probe and a turned-down one
    /// never probes again.
    #[test]
    fn no_probe_when_even_the_best_case_does_not_pay() {
        let mut c = VerifyCost::with_row_cost(1.0);
        c.set_draft_prior(1.0);
        let mut fresh = Acceptance::default();
        assert!((0..1000).all(|_| fresh.choose(4, plain(1), &c, 0) == 0));
        let mut cheap = VerifyCost::with_row_cost(0.05);
        cheap.set_draft_prior(0.3);
        assert_eq!(fresh.choose(4, plain(1), &cheap, 0), 1);
        // A draft at 45% of the target's bytes could pay if every draft were accepted, but
        // catching it up over a 100-token prompt costs more than 5% of a step per row.
        let mut mid = VerifyCost::with_row_cost(0.05);
        mid.set_draft_prior(0.45);
        let mut fresh = Acceptance::default();
        assert_eq!(fresh.choose(4, plain(1), &mid, 100), 0);
        assert_eq!(fresh.choose(4, plain(1), &mid, 2), 1);
        assert_eq!(fresh.choose(4, plain(1), &cheap, 100), 1);
    }
}
