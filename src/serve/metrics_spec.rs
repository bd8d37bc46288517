//! Speculative decoding's series in `/metrics` (`--spec`), with vLLM's names: verify steps
//! with drafts, draft tokens proposed and accepted, accepted drafts per position. All zero
//! without speculation.
use crate::engine::spec::SpecStats;
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

/// The series.
pub struct SpecMetrics {
    /// `nanollm_spec_decode_num_drafts_total`: verify steps that carried drafts.
    pub num_drafts: IntCounter,
    /// `nanollm_spec_decode_num_draft_tokens_total`: draft tokens proposed.
    pub num_draft_tokens: IntCounter,
    /// `nanollm_spec_decode_num_accepted_tokens_total`: draft tokens accepted.
    pub num_accepted_tokens: IntCounter,
    /// `nanollm_spec_decode_num_accepted_tokens_per_pos_total{position}`: drafts accepted
    /// at each draft position (0 = the first draft of a step).
    pub per_pos: IntCounterVec,
}

impl SpecMetrics {
    /// Register the series in `registry`. Errors: a name clash (a bug).
    pub fn new(registry: &Registry) -> prometheus::Result<SpecMetrics> {
        let counter = |name: &str, help: &str| -> prometheus::Result<IntCounter> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let per_pos = IntCounterVec::new(
            Opts::new(
                "spec_decode_num_accepted_tokens_per_pos_total",
                "Draft tokens accepted, by position in the draft (0 = first).",
            ),
            &["position"],
        )?;
        registry.register(Box::new(per_pos.clone()))?;
        Ok(SpecMetrics {
            num_drafts: counter(
                "spec_decode_num_drafts_total",
                "Speculative verify steps that carried draft tokens.",
            )?,
            num_draft_tokens: counter(
                "spec_decode_num_draft_tokens_total",
                "Draft tokens proposed.",
            )?,
            num_accepted_tokens: counter(
                "spec_decode_num_accepted_tokens_total",
                "Draft tokens accepted (the token each verify step samples not counted).",
            )?,
            per_pos,
        })
    }

    /// Add what changed from `last` to `now` (the engine's counters are monotonic) and
    /// keep `now` as the new `last`.
    pub fn observe(&self, now: &SpecStats, last: &mut SpecStats) {
        let add = |c: &IntCounter, n: u64, l: u64| c.inc_by(n.saturating_sub(l));
        add(&self.num_drafts, now.num_drafts, last.num_drafts);
        add(
            &self.num_draft_tokens,
            now.num_draft_tokens,
            last.num_draft_tokens,
        );
        add(
            &self.num_accepted_tokens,
            now.num_accepted_tokens,
            last.num_accepted_tokens,
        );
        for (p, &n) in now.num_accepted_tokens_per_pos.iter().enumerate() {
            let l = last
                .num_accepted_tokens_per_pos
                .get(p)
                .copied()
                .unwrap_or(0);
            add(&self.per_pos.with_label_values(&[&p.to_string()]), n, l);
        }
        *last = now.clone();
    }
}
