//! [`VerifyCost`]: what a verify step's extra rows cost on this machine, fitted from the
//! engine's own decode steps (step time against rows), for the turn-down rule.

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

    /// The fitted line `(a, b)` in seconds and seconds per row: None until two sizes at
    /// least a row apart were timed. A line through the origin or below it (rows cost
    /// nearly everything) keeps a tenth of the smallest step as its fixed part.
    fn line(&self) -> Option<(f64, f64)> {
        let pts = self.points();
        let n = pts.len() as f64;
        let (lo, hi) = (*pts.keys().next()?, *pts.keys().last()?);
        if hi - lo < 1 {
            return None;
        }
        let mx = pts.keys().map(|&x| x as f64).sum::<f64>() / n;
        let my = pts.values().sum::<f64>() / n;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for (&x, &y) in &pts {
            sxy += (x as f64 - mx) * (y - my);
            sxx += (x as f64 - mx).powi(2);
        }
        let b = (sxy / sxx).max(0.0);
        let floor = pts.values().fold(f64::MAX, |m, &y| m.min(y)) / 10.0;
        let a = (my - b * mx).max(floor);
        (a.is_finite() && b.is_finite()).then_some((a, b))
    }

    /// The sizes that price steps, with their mean times: those timed [`MIN_SAMPLES`] times
    /// or more, or every size timed while none has been.
    fn points(&self) -> std::collections::BTreeMap<usize, f64> {
        let trusted = self.sizes.values().any(|&(_, n)| n >= MIN_SAMPLES);
        self.sizes
            .iter()
            .filter(|(_, &(_, n))| !trusted || n >= MIN_SAMPLES)
            .map(|(&x, &(y, _))| (x, y))
            .collect()
    }

    /// The fixed part `a` of a step's time in seconds: the fit's, or (before there is one)
    /// the mean step time shared out by the prior; None before any step is timed.
    fn intercept(&self) -> Option<f64> {
        if let Some((a, _)) = self.line() {
            return Some(a);
        }
        let (&x, &y) = self.points().iter().next()?;
        let a = y / (1.0 + self.prior * x as f64);
        (a > 0.0).then_some(a)
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
        match (self.time(shape.rows), self.time(1)) {
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

    /// A draft round's time relative to a step's fixed part (0 when either is unknown).
    pub fn draft_cost(&self) -> f64 {
        match self.intercept() {
            Some(a) if self.draft_round > 0.0 => self.draft_round / a,
            _ => 0.0,
        }
    }

    /// Seconds per row beyond the measured sizes: the fit's slope, or before there is one
    /// the prior times the fixed part.
    fn slope(&self) -> f64 {
        match self.line() {
            Some((_, b)) => b,
            None => self.intercept().map_or(0.0, |a| a * self.prior),
        }
    }

    /// Estimated seconds of a decode step of `rows` rows (≥ 1), None before any step was
    /// timed. Each size is priced by what steps of that size measured, not by a line through
    /// all sizes: a step's cost is not linear in its rows (a large LM head's logits, caches
    /// outgrown), and a batch that drafts keeps stepping at the sizes it prices. A size not
    /// timed ([`MIN_SAMPLES`] times) is interpolated between its measured neighbours, or
    /// extended past the ends by the fitted slope; the result never falls below a smaller
    /// size's (noise must not make a row look free).
    pub fn time(&self, rows: usize) -> Option<f64> {
        let rows = rows.max(1);
        let pts = self.points();
        let (&first, &t_first) = pts.iter().next()?;
        let floor = pts.values().fold(f64::MAX, |m, &y| m.min(y)) / 10.0;
        let mut envelope = 0.0f64;
        let mut below: Option<(usize, f64)> = None;
        for (&x, &y) in pts.range(..=rows) {
            envelope = envelope.max(y);
            below = Some((x, envelope));
        }
        let above = pts.range(rows + 1..).next();
        let t = match (below, above) {
            (Some((x0, y0)), _) if x0 == rows => y0,
            (Some((x0, y0)), Some((&x1, &y1))) => {
                let y1 = y1.max(y0);
                y0 + (y1 - y0) * (rows - x0) as f64 / (x1 - x0) as f64
            }
            (Some((x0, y0)), None) => y0 + self.slope() * (rows - x0) as f64,
            (None, _) => (t_first - self.slope() * (first - rows) as f64).max(floor),
        };
        (t.is_finite() && t > 0.0).then_some(t)
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

    /// One more row's cost relative to the step's fixed part (`b / a`, 0 ..= 10): the fit's
    /// once two step sizes were timed, else the prior.
    pub fn row_cost(&self) -> f64 {
        match self.line() {
            Some((a, b)) => (b / a).clamp(0.0, 10.0),
            None => self.prior,
        }
    }

    /// A step of `base_rows + n` rows against one of `base_rows` rows, in time (≥ 1), with
    /// `n` draft-model rounds when one drafts (shared by the step's `base_rows` rows: their
    /// drafts run in the same rounds). Each size as [`Self::time`] prices it; before any
    /// step was timed, the prior line.
    pub fn ratio(&self, base_rows: usize, n: usize) -> f64 {
        let base = base_rows.max(1);
        let (Some(t0), Some(t1), Some(one)) = (self.time(base), self.time(base + n), self.time(1))
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
mod tests {
    use super::*;

    /// Time `MIN_SAMPLES` steps of `rows` rows at `seconds` each.
    fn timed(c: &mut VerifyCost, rows: usize, seconds: f64) {
        for _ in 0..MIN_SAMPLES {
            c.record(rows, seconds);
        }
    }

    /// One slow step (a neighbour on the VM) does not price its size while other sizes
    /// were timed often enough; three do.
    #[test]
    fn one_slow_step_does_not_price_its_size() {
        let mut c = VerifyCost::default();
        timed(&mut c, 1, 0.010);
        timed(&mut c, 3, 0.012);
        c.record(2, 0.030);
        assert!((c.time(2).unwrap() - 0.011).abs() < 1e-12);
        assert!(c.ratio(1, 1) < 1.2);
        c.record(2, 0.030);
        c.record(2, 0.030);
        assert!((c.time(2).unwrap() - 0.030).abs() < 1e-12);
    }

    #[test]
    fn the_prior_until_steps_of_different_sizes_are_timed() {
        let mut c = VerifyCost::default();
        assert_eq!(c.row_cost(), PRIOR_ROW_COST);
        for _ in 0..10 {
            c.record(1, 0.006);
        }
        assert_eq!(c.row_cost(), PRIOR_ROW_COST, "one size only: no slope");
    }

    #[test]
    fn fits_the_line_of_timed_steps() {
        let mut c = VerifyCost::default();
        // a = 5 ms, b = 0.5 ms per row: b / a = 0.1.
        for rows in [1, 5, 1, 3, 1, 5, 2, 1] {
            timed(&mut c, rows, 0.005 + 0.0005 * rows as f64);
        }
        assert!((c.row_cost() - 0.1).abs() < 1e-9, "{}", c.row_cost());
        assert!((c.ratio(1, 4) - 1.5 / 1.1).abs() < 1e-9);
        assert_eq!(c.ratio(3, 0), 1.0);
    }

    /// A batch stuck at one size keeps the slope its smaller steps measured: 1000 steps of
    /// 40 rows after a few of 8 to 12 do not wash out the line.
    #[test]
    fn a_batch_at_one_size_keeps_its_measured_slope() {
        let mut c = VerifyCost::default();
        let t = |rows: usize| 0.010 + 0.002 * rows as f64; // b / a = 0.2
        for rows in [8, 9, 12, 10] {
            timed(&mut c, rows, t(rows));
        }
        for _ in 0..1000 {
            c.record(40, t(40));
        }
        assert!((c.row_cost() - 0.2).abs() < 1e-9, "{}", c.row_cost());
        // Drafting four rows each in a batch of 8 costs (1 + 0.2·40) / (1 + 0.2·8).
        assert!((c.ratio(8, 32) - 9.0 / 2.6).abs() < 1e-9);
    }

    #[test]
    fn a_draft_round_is_priced_against_the_steps_fixed_part() {
        let mut c = VerifyCost::default();
        assert_eq!(c.draft_cost(), 0.0);
        c.record(1, 0.010);
        c.record(3, 0.014); // a = 8 ms, b = 2 ms
        c.record_draft(2, 0.008);
        assert!((c.draft_cost() - 0.5).abs() < 1e-9, "{}", c.draft_cost());
    }

    /// A step whose cost jumps past a size (here 40 rows cost twice the line through the
    /// smaller sizes) is priced by what it measured, not by the line.
    #[test]
    fn each_size_is_priced_by_its_own_steps() {
        let mut c = VerifyCost::default();
        let line = |rows: usize| 0.010 + 0.001 * rows as f64;
        for rows in [8, 10, 12, 16] {
            c.record(rows, line(rows));
        }
        c.record(40, 2.0 * line(40));
        assert!((c.time(40).unwrap() - 0.1).abs() < 1e-12);
        // Between measured sizes: interpolated; past the ends: the fitted slope.
        assert!((c.time(14).unwrap() - line(14)).abs() < 1e-12);
        assert!((c.time(28).unwrap() - (line(16) + 0.5 * (0.1 - line(16)))).abs() < 1e-12);
        assert!(c.time(41).unwrap() > 0.1);
        assert!(c.time(4).unwrap() < line(8) && c.time(4).unwrap() > 0.0);
        assert!((c.ratio(8, 32) - 0.1 / line(8)).abs() < 1e-12);
        // Noise that makes a larger size measure faster than a smaller one is ignored.
        c.record(20, 0.001);
        assert!(c.time(20).unwrap() >= c.time(16).unwrap());
        assert!(c.ratio(16, 4) >= 1.0);
    }

    #[test]
    fn the_prior_prices_steps_before_any_is_timed() {
        let c = VerifyCost::with_row_cost(0.5);
        assert_eq!(c.time(3), None);
        assert!((c.ratio(1, 2) - 2.5 / 1.5).abs() < 1e-12);
    }

    /// A draft's catch-up row is allowed at up to 5% of a sequence's share of the step: a
    /// draft a tenth of the target's bytes alone, not at half, not in a batch of 8.
    #[test]
    fn catch_up_is_allowed_for_a_cheap_draft_only() {
        let alone = super::super::StepShape::alone();
        let batch = super::super::StepShape {
            seqs: 8,
            rows: 8,
            tokens: 8.0,
        };
        let mut cheap = VerifyCost::default();
        cheap.set_draft_prior(0.1);
        assert!(cheap.catch_up_pays(alone));
        let mut dear = VerifyCost::default();
        dear.set_draft_prior(0.5);
        assert!(!dear.catch_up_pays(alone));
        // Timed: 10 ms one-row steps, 16 ms at 8 rows; catch-up rows of 0.4 ms.
        let mut c = VerifyCost::default();
        c.record(1, 0.010);
        c.record(8, 0.016);
        c.record_catch_up(100, 0.040);
        assert!(c.catch_up_pays(alone));
        assert!(!c.catch_up_pays(batch));
    }
}
