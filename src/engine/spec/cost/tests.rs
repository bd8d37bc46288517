//! [`VerifyCost`]'s tests, and the two figures they read that the rule no longer asks for.
use super::*;

impl VerifyCost {
    /// One more row's cost relative to the step's fixed part (`b / a`, 0 ..= 10): the fit's
    /// once two step sizes were timed, else the prior.
    fn row_cost(&self) -> f64 {
        match self.steps().line() {
            Some((a, b)) => (b / a).clamp(0.0, 10.0),
            None => self.prior,
        }
    }

    /// A draft round's time relative to a step's fixed part (0 when either is unknown).
    fn draft_cost(&self) -> f64 {
        match self.steps().intercept() {
            Some(a) if self.draft_round > 0.0 => self.draft_round / a,
            _ => 0.0,
        }
    }
}

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
