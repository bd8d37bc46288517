//! [`VerifyCost`]: what a verify step's extra rows cost on this machine, fitted from the
//! engine's own decode steps (step time against rows), for the turn-down rule.

/// Cost of one more row in a decode step, relative to a one-row step's fixed part, used
/// until the engine has timed steps of different sizes. Measured on the default model on a
/// 2-core Xeon VM (`bench --spec-synth-rates 0`: a 17-row step ~4.9× a one-row step).
pub const PRIOR_ROW_COST: f64 = 0.25;

/// Weight a bucket's mean keeps when a step of its size is timed again (about the last
/// five steps of that size).
const DECAY: f64 = 0.8;

/// A line `seconds = a + b · rows` fitted over the mean step time of each step size seen.
/// A size counts once however often it recurs, so a batch that keeps stepping at one size
/// (eight sequences drafting four tokens each: 40 rows) still weighs the smaller steps it
/// took before (its probes, its plain steps) and the slope stays measured.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyCost {
    /// Per step size (rows), the decayed mean time in seconds.
    sizes: std::collections::BTreeMap<usize, f64>,
    /// `b / a` when too few sizes have been timed.
    prior: f64,
    /// Seconds per draft-model round (one batched row per drafting sequence), decayed
    /// mean; 0 until one is timed (prompt lookup has none).
    draft_round: f64,
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
        }
    }

    /// Time a draft model's drafting: `rounds` one-row batched rounds in `seconds` (the
    /// first round, which also catches the draft up, is not counted).
    pub fn record_draft(&mut self, rounds: usize, seconds: f64) {
        if rounds == 0 || !seconds.is_finite() || seconds <= 0.0 {
            return;
        }
        let per = seconds / rounds as f64;
        self.draft_round = if self.draft_round == 0.0 {
            per
        } else {
            self.draft_round * DECAY + per * (1.0 - DECAY)
        };
    }

    /// The fitted line `(a, b)` in seconds and seconds per row: None until two sizes at
    /// least a row apart were timed. A line through the origin or below it (rows cost
    /// nearly everything) keeps a tenth of the smallest step as its fixed part.
    fn line(&self) -> Option<(f64, f64)> {
        let n = self.sizes.len() as f64;
        let (lo, hi) = (*self.sizes.keys().next()?, *self.sizes.keys().last()?);
        if hi - lo < 1 {
            return None;
        }
        let mx = self.sizes.keys().map(|&x| x as f64).sum::<f64>() / n;
        let my = self.sizes.values().sum::<f64>() / n;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for (&x, &y) in &self.sizes {
            sxy += (x as f64 - mx) * (y - my);
            sxx += (x as f64 - mx).powi(2);
        }
        let b = (sxy / sxx).max(0.0);
        let floor = self.sizes.values().fold(f64::MAX, |m, &y| m.min(y)) / 10.0;
        let a = (my - b * mx).max(floor);
        (a.is_finite() && b.is_finite()).then_some((a, b))
    }

    /// The fixed part `a` of a step's time in seconds: the fit's, or (before there is one)
    /// the mean step time shared out by the prior; None before any step is timed.
    fn intercept(&self) -> Option<f64> {
        if let Some((a, _)) = self.line() {
            return Some(a);
        }
        let (&x, &y) = self.sizes.iter().next()?;
        let a = y / (1.0 + self.prior * x as f64);
        (a > 0.0).then_some(a)
    }

    /// A draft round's time relative to a step's fixed part (0 when either is unknown).
    pub fn draft_cost(&self) -> f64 {
        match self.intercept() {
            Some(a) if self.draft_round > 0.0 => self.draft_round / a,
            _ => 0.0,
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
            .and_modify(|m| *m = *m * DECAY + seconds * (1.0 - DECAY))
            .or_insert(seconds);
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
    /// `n` draft-model rounds when one drafts (shared by the step's `base_rows` sequences:
    /// their rows run in the same rounds).
    pub fn ratio(&self, base_rows: usize, n: usize) -> f64 {
        let r = self.row_cost();
        let base = base_rows.max(1) as f64;
        let drafting = n as f64 * self.draft_cost() / base;
        (1.0 + r * (base_rows + n) as f64 + drafting) / (1.0 + r * base_rows as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            c.record(rows, 0.005 + 0.0005 * rows as f64);
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
            c.record(rows, t(rows));
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
}
