//! The disk tier's lines in `run-batch`'s and `bench`'s summaries: prompt tokens served by
//! the pool, by the disk tier, and missed; bytes read and written.
use crate::kv::offload::OffloadStats;
use crate::units::human_bytes;

/// Two summary lines (each ending in a newline) for a run that looked up `queries` prompt
/// tokens, of which the pool served `pool_hits` and the disk tier `disk_hits`, with the
/// tier's counters `t`.
pub fn lines(queries: u64, pool_hits: u64, disk_hits: u64, t: &OffloadStats) -> String {
    let missed = queries.saturating_sub(pool_hits + disk_hits);
    let mut s = format!(
        "prefix tiers          {pool_hits} prompt tokens from the pool, {disk_hits} from disk ({} blocks read, {}), {missed} missed\n",
        t.blocks_read,
        human_bytes(t.bytes_read)
    );
    s += &format!(
        "disk tier             {} blocks written ({} in {} files), {} dropped, {} files evicted, {} rejected; {} on disk\n",
        t.blocks_written,
        human_bytes(t.bytes_written),
        t.files_written,
        t.writes_dropped,
        t.files_evicted,
        t.files_rejected,
        human_bytes(t.bytes_on_disk)
    );
    s
}
