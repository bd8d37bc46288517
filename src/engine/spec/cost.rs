//! [`VerifyCost`]: what a verify step's extra rows cost on this machine, fitted from the
//! engine's own decode steps (step time against rows), for the turn-down rule.

/// Cost of one more row in a decode step, relative to a one-row step's fixed part, used
/// until the engine has timed steps of different sizes. Measured on the default model on a
/// 2-core Xeon VM (`bench --spec-synth-rates 0`: a 17-row step ~4.9× a one-row step).
pub const PRIOR_ROW_COST: f64 = 0.25;

/// Weight a timed step keeps per later timed step (a window of about 50 steps).
const DECAY: f64 = 0.98;

/// A least-squares line `seconds = a + b · rows` over recent decode-only steps.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyCost {
    n: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
    /// `b / a` when too few steps of different sizes have been timed.
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
            n: 0.0,
            sx: 0.0,
            sy: 0.0,
            sxx: 0.0,
            sxy: 0.0,
            prior: row_cost,
            draft_round: 0.0,
        }
    }

    /// Time a draft model's drafting: `rounds` batched rounds (the catch-up pass counts as
    /// one) in `seconds`.
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

    /// The fixed part `a` of a step's time in seconds: the fit's, or (before there is one)
    /// the mean step time shared out by the prior; None before any step is timed.
    fn intercept(&self) -> Option<f64> {
        if self.n <= 0.0 {
            return None;
        }
        let (mx, my) = (self.sx / self.n, self.sy / self.n);
        let r = self.row_cost();
        let a = my / (1.0 + r * mx);
        (a > 0.0).then_some(a)
    }

    /// A draft round's time relative to a step's fixed part (0 when either is unknown).
    pub fn draft_cost(&self) -> f64 {
        match self.intercept() {
            Some(a) if self.draft_round > 0.0 => self.draft_round / a,
            _ => 0.0,
        }
    }

    /// Time one decode-only step (no prompt rows): `rows` rows in `seconds` of forward pass.
    pub fn record(&mut self, rows: usize, seconds: f64) {
        if rows == 0 || !seconds.is_finite() || seconds <= 0.0 {
            return;
        }
        let x = rows as f64;
        self.n = self.n * DECAY + 1.0;
        self.sx = self.sx * DECAY + x;
        self.sy = self.sy * DECAY + seconds;
        self.sxx = self.sxx * DECAY + x * x;
        self.sxy = self.sxy * DECAY + x * seconds;
    }

    /// One more row's cost relative to the step's fixed part (`b / a`, 0 ..= 10): the fit's
    /// once at least 4 steps with a spread of sizes were timed, else the prior.
    pub fn row_cost(&self) -> f64 {
        if self.n < 4.0 {
            return self.prior;
        }
        let mean_x = self.sx / self.n;
        let var_x = self.sxx / self.n - mean_x * mean_x;
        if var_x < 0.25 {
            return self.prior;
        }
        let b = (self.sxy / self.n - mean_x * self.sy / self.n) / var_x;
        let a = self.sy / self.n - b * mean_x;
        if a <= 0.0 || !b.is_finite() {
            return self.prior;
        }
        (b / a).clamp(0.0, 10.0)
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
}
