//! [`Steps`]: the decode-step sizes timed so far and their mean times, as the rule prices a
//! step from them — each size by its own mean, the rest interpolated or extended by a
//! fitted line. Built once per question ([`super::VerifyCost::ratio`] asks three sizes).

/// Step sizes (rows) and their mean times in seconds, ascending by size, with the prior
/// `b / a` for when no line can be fitted.
pub(super) struct Steps {
    pts: Vec<(usize, f64)>,
    prior: f64,
}

impl Steps {
    /// `pts` ascending by size.
    pub(super) fn new(pts: Vec<(usize, f64)>, prior: f64) -> Steps {
        Steps { pts, prior }
    }

    /// The fitted line `(a, b)` in seconds and seconds per row: None until two sizes at
    /// least a row apart were timed. A line through the origin or below it (rows cost
    /// nearly everything) keeps a tenth of the smallest step as its fixed part.
    pub(super) fn line(&self) -> Option<(f64, f64)> {
        let (lo, hi) = (self.pts.first()?.0, self.pts.last()?.0);
        if hi - lo < 1 {
            return None;
        }
        let n = self.pts.len() as f64;
        let mx = self.pts.iter().map(|&(x, _)| x as f64).sum::<f64>() / n;
        let my = self.pts.iter().map(|&(_, y)| y).sum::<f64>() / n;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for &(x, y) in &self.pts {
            sxy += (x as f64 - mx) * (y - my);
            sxx += (x as f64 - mx).powi(2);
        }
        let b = (sxy / sxx).max(0.0);
        let a = (my - b * mx).max(self.floor());
        (a.is_finite() && b.is_finite()).then_some((a, b))
    }

    /// A tenth of the smallest mean: no step is priced below it.
    fn floor(&self) -> f64 {
        self.pts.iter().fold(f64::MAX, |m, &(_, y)| m.min(y)) / 10.0
    }

    /// The fixed part `a` of a step's time in seconds: the fit's, or (before there is one)
    /// the mean step time shared out by the prior; None before any step is timed.
    pub(super) fn intercept(&self) -> Option<f64> {
        if let Some((a, _)) = self.line() {
            return Some(a);
        }
        let &(x, y) = self.pts.first()?;
        let a = y / (1.0 + self.prior * x as f64);
        (a > 0.0).then_some(a)
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
    /// timed is interpolated between its measured neighbours, or extended past the ends by
    /// the fitted slope; the result never falls below a smaller size's (noise must not make
    /// a row look free).
    pub(super) fn time(&self, rows: usize) -> Option<f64> {
        let rows = rows.max(1);
        let &(first, t_first) = self.pts.first()?;
        let mut envelope = 0.0f64;
        let mut below: Option<(usize, f64)> = None;
        for &(x, y) in self.pts.iter().take_while(|&&(x, _)| x <= rows) {
            envelope = envelope.max(y);
            below = Some((x, envelope));
        }
        let above = self.pts.iter().find(|&&(x, _)| x > rows);
        let t = match (below, above) {
            (Some((x0, y0)), _) if x0 == rows => y0,
            (Some((x0, y0)), Some(&(x1, y1))) => {
                let y1 = y1.max(y0);
                y0 + (y1 - y0) * (rows - x0) as f64 / (x1 - x0) as f64
            }
            (Some((x0, y0)), None) => y0 + self.slope() * (rows - x0) as f64,
            (None, _) => (t_first - self.slope() * (first - rows) as f64).max(self.floor()),
        };
        (t.is_finite() && t > 0.0).then_some(t)
    }
}
