//! [`SpecStats`]: speculative decoding's counters, with vLLM's names
//! (`spec_decode_num_drafts`, `num_draft_tokens`, `num_accepted_tokens`,
//! `num_accepted_tokens_per_pos`).
use serde::Serialize;

/// What the verify steps proposed and kept, per engine or per request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SpecStats {
    /// Verify steps that carried at least one draft token (vLLM's `num_drafts`).
    pub num_drafts: u64,
    /// Draft tokens proposed.
    pub num_draft_tokens: u64,
    /// Draft tokens the target agreed with (the bonus token each verify step samples is not
    /// counted: it would have been sampled without speculation too).
    pub num_accepted_tokens: u64,
    /// Per draft position (0 = the first draft of a step): drafts accepted there.
    pub num_accepted_tokens_per_pos: Vec<u64>,
    /// Per draft position: drafts proposed there.
    pub num_draft_tokens_per_pos: Vec<u64>,
}

impl SpecStats {
    /// Count one verify step that proposed `drafted` tokens and kept the first `accepted`.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.num_drafts += 1;
        self.num_draft_tokens += drafted as u64;
        self.num_accepted_tokens += accepted as u64;
        if self.num_draft_tokens_per_pos.len() < drafted {
            self.num_draft_tokens_per_pos.resize(drafted, 0);
            self.num_accepted_tokens_per_pos.resize(drafted, 0);
        }
        for p in 0..drafted {
            self.num_draft_tokens_per_pos[p] += 1;
            if p < accepted {
                self.num_accepted_tokens_per_pos[p] += 1;
            }
        }
    }

    /// Add `other`'s counts to these.
    pub fn add(&mut self, other: &SpecStats) {
        self.num_drafts += other.num_drafts;
        self.num_draft_tokens += other.num_draft_tokens;
        self.num_accepted_tokens += other.num_accepted_tokens;
        let n = other.num_draft_tokens_per_pos.len();
        if self.num_draft_tokens_per_pos.len() < n {
            self.num_draft_tokens_per_pos.resize(n, 0);
            self.num_accepted_tokens_per_pos.resize(n, 0);
        }
        for p in 0..n {
            self.num_draft_tokens_per_pos[p] += other.num_draft_tokens_per_pos[p];
            self.num_accepted_tokens_per_pos[p] += other.num_accepted_tokens_per_pos[p];
        }
    }

    /// Accepted over proposed draft tokens, 0 ..= 1; None before any draft.
    pub fn acceptance_rate(&self) -> Option<f64> {
        (self.num_draft_tokens > 0)
            .then(|| self.num_accepted_tokens as f64 / self.num_draft_tokens as f64)
    }

    /// Tokens each verify step produced on average: accepted drafts + the one sampled
    /// token (vLLM's "mean acceptance length"); None before any draft.
    pub fn mean_accepted_length(&self) -> Option<f64> {
        (self.num_drafts > 0)
            .then(|| 1.0 + self.num_accepted_tokens as f64 / self.num_drafts as f64)
    }
}

impl std::fmt::Display for SpecStats {
    /// One line: verify steps, drafts proposed and accepted, the mean accepted length and
    /// the acceptance rate per draft position.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (Some(rate), Some(len)) = (self.acceptance_rate(), self.mean_accepted_length()) else {
            return write!(f, "no draft proposed");
        };
        let per_pos: Vec<String> = self
            .num_accepted_tokens_per_pos
            .iter()
            .zip(&self.num_draft_tokens_per_pos)
            .map(|(&a, &d)| format!("{:.0}%", 100.0 * a as f64 / d.max(1) as f64))
            .collect();
        write!(
            f,
            "{} verify steps with drafts, {} of {} draft tokens accepted ({:.1}%), {:.2} tokens per verify step; acceptance by position {}",
            self.num_drafts,
            self.num_accepted_tokens,
            self.num_draft_tokens,
            100.0 * rate,
            len,
            per_pos.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::SpecStats;

    #[test]
    fn counts_per_position_and_rates() {
        let mut s = SpecStats::default();
        s.record(3, 2);
        s.record(1, 0);
        s.record(0, 0);
        assert_eq!(s.num_drafts, 2);
        assert_eq!(s.num_draft_tokens, 4);
        assert_eq!(s.num_accepted_tokens, 2);
        assert_eq!(s.num_draft_tokens_per_pos, vec![2, 1, 1]);
        assert_eq!(s.num_accepted_tokens_per_pos, vec![1, 1, 0]);
        assert_eq!(s.acceptance_rate(), Some(0.5));
        assert_eq!(s.mean_accepted_length(), Some(2.0));
        let mut t = SpecStats::default();
        t.add(&s);
        t.add(&s);
        assert_eq!(t.num_accepted_tokens_per_pos, vec![2, 2, 0]);
        assert_eq!(
            s.to_string(),
            "2 verify steps with drafts, 2 of 4 draft tokens accepted (50.0%), 2.00 tokens per verify step; acceptance by position 50%, 100%, 0%"
        );
        assert_eq!(SpecStats::default().to_string(), "no draft proposed");
    }
}
