//! The disk tier's series in `/metrics` (`--kv-offload-dir`): prompt tokens read back from
//! disk beside the pool's hits (vLLM's `external_prefix_cache_hits`), bytes and blocks read
//! and written, dropped writes, files written / evicted / rejected, bytes on disk. All zero
//! without a tier.
use crate::kv::offload::OffloadStats;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// The series.
pub struct OffloadMetrics {
    /// `nanollm_prefix_cache_disk_hits_total`: prompt tokens the disk tier served (not in
    /// `prefix_cache_hits_total`, which counts the pool's).
    pub disk_hits: IntCounter,
    /// `nanollm_kv_offload_bytes_total{direction="read"|"written"}`.
    pub bytes: IntCounterVec,
    /// `nanollm_kv_offload_blocks_total{event="read"|"written"|"dropped"}`.
    pub blocks: IntCounterVec,
    /// `nanollm_kv_offload_files_total{event="written"|"evicted"|"rejected"}`.
    pub files: IntCounterVec,
    /// `nanollm_kv_offload_bytes_on_disk`: bytes of the directory's block files.
    pub on_disk: IntGauge,
}

impl OffloadMetrics {
    /// Register the series in `registry`. Errors: a name clash (a bug).
    pub fn new(registry: &Registry) -> prometheus::Result<OffloadMetrics> {
        let vec = |name: &str, help: &str, label: &str| -> prometheus::Result<IntCounterVec> {
            let v = IntCounterVec::new(Opts::new(name, help), &[label])?;
            registry.register(Box::new(v.clone()))?;
            Ok(v)
        };
        let disk_hits = IntCounter::new(
            "prefix_cache_disk_hits_total",
            "Prompt tokens read back from the disk tier (--kv-offload-dir) instead of prefilled.",
        )?;
        registry.register(Box::new(disk_hits.clone()))?;
        let on_disk = IntGauge::new(
            "kv_offload_bytes_on_disk",
            "Bytes of KV block files in --kv-offload-dir (every fingerprint).",
        )?;
        registry.register(Box::new(on_disk.clone()))?;
        Ok(OffloadMetrics {
            disk_hits,
            bytes: vec(
                "kv_offload_bytes_total",
                "Bytes of KV blocks read from and written to the disk tier.",
                "direction",
            )?,
            blocks: vec(
                "kv_offload_blocks_total",
                "KV blocks read from, written to, or dropped before the disk tier.",
                "event",
            )?,
            files: vec(
                "kv_offload_files_total",
                "Disk-tier files written, evicted by the byte budget, or rejected (corrupt, truncated, foreign).",
                "event",
            )?,
            on_disk,
        })
    }

    /// Add what changed from `last` to `now` (the tier's counters are monotonic) and keep
    /// `now` as the new `last`; `disk_hits` likewise from `last_hits`.
    pub fn observe(
        &self,
        now: &OffloadStats,
        last: &mut OffloadStats,
        hits: u64,
        last_hits: &mut u64,
    ) {
        let add = |c: &IntCounter, n: u64, l: u64| c.inc_by(n.saturating_sub(l));
        add(&self.disk_hits, hits, *last_hits);
        add(
            &self.bytes.with_label_values(&["read"]),
            now.bytes_read,
            last.bytes_read,
        );
        add(
            &self.bytes.with_label_values(&["written"]),
            now.bytes_written,
            last.bytes_written,
        );
        add(
            &self.blocks.with_label_values(&["read"]),
            now.blocks_read,
            last.blocks_read,
        );
        add(
            &self.blocks.with_label_values(&["written"]),
            now.blocks_written,
            last.blocks_written,
        );
        add(
            &self.blocks.with_label_values(&["dropped"]),
            now.writes_dropped,
            last.writes_dropped,
        );
        add(
            &self.files.with_label_values(&["written"]),
            now.files_written,
            last.files_written,
        );
        add(
            &self.files.with_label_values(&["evicted"]),
            now.files_evicted,
            last.files_evicted,
        );
        add(
            &self.files.with_label_values(&["rejected"]),
            now.files_rejected,
            last.files_rejected,
        );
        self.on_disk
            .set(i64::try_from(now.bytes_on_disk).unwrap_or(i64::MAX));
        *last = *now;
        *last_hits = hits;
    }
}
