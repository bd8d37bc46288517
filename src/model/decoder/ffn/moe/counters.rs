//! What a mixture-of-experts block's router did: per block, the passes it ran, the rows it
//! routed, the distinct experts those passes touched and how often each expert was chosen
//! (the router histogram). Atomic counters, so the shared decoder counts while it runs;
//! callers take a [`ExpertCounts`] snapshot before and after a phase and subtract.
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// One block's live counters.
#[derive(Debug, Default)]
pub struct ExpertCounters {
    passes: AtomicU64,
    rows: AtomicU64,
    touched: AtomicU64,
    chosen: Vec<AtomicU64>,
}

/// A snapshot of [`ExpertCounters`] (or the difference of two).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExpertCounts {
    /// Forward passes through the block (one per decode step or prompt chunk).
    pub passes: u64,
    /// Rows routed (tokens; each picks k experts).
    pub rows: u64,
    /// Σ over passes of the distinct experts the pass ran: the expert weights read.
    pub touched: u64,
    /// How many rows chose each expert (`[num_experts]`).
    pub chosen: Vec<u64>,
}

impl ExpertCounters {
    /// Counters for `experts` experts, all zero.
    pub fn new(experts: usize) -> ExpertCounters {
        ExpertCounters {
            chosen: (0..experts).map(|_| AtomicU64::new(0)).collect(),
            ..ExpertCounters::default()
        }
    }

    /// Count one pass of `rows` rows in which expert `e` was chosen `per_expert[e]` times.
    pub fn record(&self, rows: usize, per_expert: impl Iterator<Item = usize>) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(rows as u64, Ordering::Relaxed);
        let mut touched = 0;
        for (c, n) in self.chosen.iter().zip(per_expert) {
            if n > 0 {
                touched += 1;
                c.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        self.touched.fetch_add(touched, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> ExpertCounts {
        ExpertCounts {
            passes: self.passes.load(Ordering::Relaxed),
            rows: self.rows.load(Ordering::Relaxed),
            touched: self.touched.load(Ordering::Relaxed),
            chosen: self
                .chosen
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

impl ExpertCounts {
    /// What happened between `earlier` and `self` (two snapshots of one block).
    pub fn since(&self, earlier: &ExpertCounts) -> ExpertCounts {
        ExpertCounts {
            passes: self.passes.saturating_sub(earlier.passes),
            rows: self.rows.saturating_sub(earlier.rows),
            touched: self.touched.saturating_sub(earlier.touched),
            chosen: self
                .chosen
                .iter()
                .zip(earlier.chosen.iter().chain(std::iter::repeat(&0)))
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
        }
    }
}
