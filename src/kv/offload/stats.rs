//! The disk tier's counters ([`OffloadStats`]): what `run-batch` prints, `bench --json`
//! writes and `/metrics` exports.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of the tier (monotonic since the tier opened, except the two `on_disk` sizes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OffloadStats {
    /// Blocks read back into the pool (disk hits, in blocks of one layer group).
    pub blocks_read: u64,
    /// Bytes read for them.
    pub bytes_read: u64,
    /// Blocks written.
    pub blocks_written: u64,
    /// Bytes of the files written (headers included).
    pub bytes_written: u64,
    /// Files written.
    pub files_written: u64,
    /// Blocks not written: the queue was full, or the write failed.
    pub writes_dropped: u64,
    /// Files that could not be written.
    pub write_errors: u64,
    /// Files deleted to stay within the budget.
    pub files_evicted: u64,
    /// Files refused (truncated, corrupt, foreign under our name) and removed, and blocks
    /// whose bytes failed their checksum.
    pub files_rejected: u64,
    /// Blocks of this fingerprint indexed now.
    pub blocks_on_disk: u64,
    /// Bytes of the tier's files in the directory now (every fingerprint).
    pub bytes_on_disk: u64,
}

/// The atomics behind [`OffloadStats`].
#[derive(Debug, Default)]
pub struct Counters {
    pub(super) blocks_read: AtomicU64,
    pub(super) bytes_read: AtomicU64,
    pub(super) blocks_written: AtomicU64,
    pub(super) bytes_written: AtomicU64,
    pub(super) files_written: AtomicU64,
    pub(super) writes_dropped: AtomicU64,
    pub(super) write_errors: AtomicU64,
    pub(super) files_evicted: AtomicU64,
    pub(super) files_rejected: AtomicU64,
}

impl Counters {
    /// The counters now, with the index's `blocks_on_disk` and `bytes_on_disk`.
    pub fn snapshot(&self, blocks_on_disk: u64, bytes_on_disk: u64) -> OffloadStats {
        OffloadStats {
            blocks_read: self.blocks_read.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            blocks_written: self.blocks_written.load(Relaxed),
            bytes_written: self.bytes_written.load(Relaxed),
            files_written: self.files_written.load(Relaxed),
            writes_dropped: self.writes_dropped.load(Relaxed),
            write_errors: self.write_errors.load(Relaxed),
            files_evicted: self.files_evicted.load(Relaxed),
            files_rejected: self.files_rejected.load(Relaxed),
            blocks_on_disk,
            bytes_on_disk,
        }
    }
}
