//! [`StepShape`] and [`BatchShape`]: the decode step a sequence's drafts would join — its
//! rows and the tokens they are expected to yield, the other sequences' drafts included —
//! so the turn-down rule prices a draft at the step size the batch really runs.

/// The step a sequence's drafts join, without them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepShape {
    /// Decoding sequences in the step (this one included).
    pub seqs: usize,
    /// Rows the step runs without this sequence's drafts: one per sequence plus the other
    /// sequences' drafts.
    pub rows: usize,
    /// Tokens those rows are expected to yield (this sequence's own row: 1).
    pub tokens: f64,
}

impl StepShape {
    /// A sequence decoding alone (`generate`).
    pub fn alone() -> StepShape {
        StepShape {
            seqs: 1,
            rows: 1,
            tokens: 1.0,
        }
    }
}

/// One step's drafts across a batch, as the sequences choose them in order: those already
/// asked this step count with their new choice, the rest with the one they made last step
/// (what they will most likely choose again). Asking in order and updating as it goes
/// settles where no sequence gains by changing alone, instead of every sequence turning
/// on and off together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchShape {
    seqs: usize,
    draft_rows: usize,
    extra_tokens: f64,
}

impl BatchShape {
    /// The batch of decoding sequences whose last choices are `last` (drafts, expected
    /// tokens beyond the first), one entry per sequence.
    pub fn new(last: impl IntoIterator<Item = (usize, f64)>) -> BatchShape {
        let mut b = BatchShape::default();
        for (n, extra) in last {
            b.seqs += 1;
            b.draft_rows += n;
            b.extra_tokens += extra;
        }
        b
    }

    /// The step a sequence whose last choice was `last` joins, without its drafts.
    pub fn without(&self, last: (usize, f64)) -> StepShape {
        let seqs = self.seqs.max(1);
        StepShape {
            seqs,
            rows: seqs + self.draft_rows.saturating_sub(last.0),
            tokens: seqs as f64 + (self.extra_tokens - last.1).max(0.0),
        }
    }

    /// A sequence changed its choice from `old` to `new`.
    pub fn update(&mut self, old: (usize, f64), new: (usize, f64)) {
        self.draft_rows = self.draft_rows.saturating_sub(old.0) + new.0;
        self.extra_tokens = (self.extra_tokens - old.1).max(0.0) + new.1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_drafts_count_and_update_in_order() {
        // Three sequences; last step two drafted 4 (3 tokens expected beyond the first).
        let mut b = BatchShape::new([(4, 3.0), (4, 3.0), (0, 0.0)]);
        let s = b.without((4, 3.0));
        assert_eq!((s.seqs, s.rows), (3, 7));
        assert!((s.tokens - 6.0).abs() < 1e-12);
        b.update((4, 3.0), (0, 0.0));
        let s = b.without((0, 0.0));
        assert_eq!(s.rows, 7);
        assert!((s.tokens - 6.0).abs() < 1e-12);
        assert_eq!(BatchShape::default().without((0, 0.0)), StepShape::alone());
    }
}
