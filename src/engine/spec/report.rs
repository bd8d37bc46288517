//! [`SpecReport`]: one request's speculative decoding, as `generate --show-stats` and
//! `--json` report it — the counters, and what a verify step cost against a one-token step.
use super::{SpecStats, Speculative};
use serde::Serialize;

/// Speculative decoding in one generation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SpecReport {
    /// The method and its settings (`ngram (1..3)`).
    pub method: String,
    /// Most drafts per verify step (`--spec-tokens`).
    pub k: usize,
    /// Whether every step drafted what it could (`--spec-force`), not what the turn-down
    /// rule chose.
    pub forced: bool,
    /// Drafts proposed and accepted, per position too.
    pub counts: SpecStats,
    /// Accepted over proposed drafts; None before any draft.
    pub acceptance_rate: Option<f64>,
    /// Tokens per verify step (accepted drafts + 1); None before any draft.
    pub mean_accepted_length: Option<f64>,
    /// Decode steps that ran one row (no draft), and their mean forward time (ms).
    pub one_token_steps: u64,
    /// Mean forward time of the one-row decode steps (ms; 0 without any).
    pub one_token_step_ms: f64,
    /// Verify steps (1 + drafts rows), and their mean forward time (ms).
    pub verify_steps: u64,
    /// Mean forward time of the verify steps (ms; 0 without any).
    pub verify_step_ms: f64,
    /// Mean rows per verify step (the last token + its drafts).
    pub verify_rows: f64,
    /// Steps where the method had drafts and the turn-down rule verified none.
    pub turned_down_steps: u64,
    /// Time the draft model spent proposing (ms; 0 for prompt lookup), its catch-up
    /// included.
    pub draft_ms: f64,
    /// Of `draft_ms`, the time spent catching up (the prompt, tokens missed while idle; ms),
    /// and the rows it ran.
    pub draft_catch_up_ms: f64,
    /// Rows the draft ran catching up.
    pub draft_catch_up_rows: u64,
}

impl SpecReport {
    /// An empty report for `spec`.
    pub fn new(spec: &Speculative) -> SpecReport {
        SpecReport {
            method: spec.method.to_string(),
            k: spec.k,
            forced: spec.force,
            ..SpecReport::default()
        }
    }

    /// Count a decode step of `rows` rows (1: no draft) that ran in `ms` milliseconds.
    pub fn step(&mut self, rows: usize, ms: f64) {
        let mean = |m: &mut f64, n: &mut u64, x: f64| {
            *n += 1;
            *m += (x - *m) / *n as f64;
        };
        if rows <= 1 {
            mean(&mut self.one_token_step_ms, &mut self.one_token_steps, ms);
        } else {
            let n = self.verify_steps as f64;
            self.verify_rows = (self.verify_rows * n + rows as f64) / (n + 1.0);
            mean(&mut self.verify_step_ms, &mut self.verify_steps, ms);
        }
    }

    /// Fill in the rates from the counts.
    pub fn finish(&mut self) {
        self.acceptance_rate = self.counts.acceptance_rate();
        self.mean_accepted_length = self.counts.mean_accepted_length();
    }

    /// A verify step's time over a one-token step's; None without both kinds of step.
    pub fn verify_cost(&self) -> Option<f64> {
        (self.verify_steps > 0 && self.one_token_steps > 0 && self.one_token_step_ms > 0.0)
            .then(|| self.verify_step_ms / self.one_token_step_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_per_kind_of_step() {
        let spec = Speculative::ngram(4, 1, 3).unwrap();
        let mut r = SpecReport::new(&spec);
        assert_eq!(r.method, "ngram (1..3)");
        r.step(1, 6.0);
        r.step(1, 8.0);
        r.step(5, 9.0);
        r.step(3, 7.0);
        assert_eq!((r.one_token_steps, r.one_token_step_ms), (2, 7.0));
        assert_eq!(
            (r.verify_steps, r.verify_step_ms, r.verify_rows),
            (2, 8.0, 4.0)
        );
        assert_eq!(r.verify_cost(), Some(8.0 / 7.0));
    }
}
