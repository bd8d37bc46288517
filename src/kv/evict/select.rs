//! Which rows stay: the `budget` best-scoring rows of one layer's KV head, with the
//! first `sinks` and the last `protect` rows always among them.

/// The rows kept of `scores.len()` (one score per row held, higher: keep), ascending:
/// every row when there are at most `budget`; else rows `0 .. sinks` and the last
/// `protect` rows (the newest first when those alone exceed the budget), then the best
/// scores of the rest, a tie going to the newer row. A NaN score counts as the lowest.
pub fn kept_rows(scores: &[f64], budget: usize, sinks: usize, protect: usize) -> Vec<usize> {
    let n = scores.len();
    if n <= budget {
        return (0..n).collect();
    }
    let sinks = sinks.min(budget);
    let protect = protect.min(budget - sinks);
    let mut kept: Vec<usize> = (0..sinks).chain(n - protect..n).collect();
    let mut rest: Vec<usize> = (sinks..n - protect).collect();
    let key = |i: usize| match scores[i] {
        s if s.is_nan() => f64::NEG_INFINITY,
        s => s,
    };
    // Best first; among equal scores the newer row.
    rest.sort_by(|&a, &b| key(b).total_cmp(&key(a)).then(b.cmp(&a)));
    kept.extend(rest.into_iter().take(budget - kept.len()));
    kept.sort_unstable();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinks_protected_rows_and_the_best_scores_stay() {
        let s = [0.0, 9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 0.5];
        assert_eq!(kept_rows(&s, 8, 0, 0), (0..8).collect::<Vec<_>>());
        assert_eq!(kept_rows(&s, 3, 0, 0), vec![1, 3, 5]);
        assert_eq!(kept_rows(&s, 3, 1, 0), vec![0, 1, 3]);
        assert_eq!(kept_rows(&s, 3, 1, 1), vec![0, 1, 7]);
        // Ties go to the newer row; NaN is the lowest.
        assert_eq!(kept_rows(&[1.0, 1.0, 1.0, f64::NAN], 2, 0, 0), vec![1, 2]);
        // Protected rows past the budget: the newest.
        assert_eq!(kept_rows(&s, 3, 1, 5), vec![0, 6, 7]);
    }
}
