//! [`Shared`]: what the engine thread's tier and the writer thread share: the index of the
//! directory's files, the counters, the names, the budget, and the scan and eviction that
//! keep the directory within it.
use super::format::Geometry;
use super::index::Index;
use super::stats::Counters;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, MutexGuard};

/// Rejected files named one line each per scan; the rest are summed up in one line.
const REJECTIONS_SHOWN: usize = 3;

/// What the engine thread and the writer share.
pub struct Shared {
    pub(super) index: Mutex<Index>,
    pub(super) stats: Counters,
    pub(super) dir: PathBuf,
    pub(super) geometry: Geometry,
    /// File names start with `<fingerprint hex>-`.
    pub(super) prefix: String,
    /// `<fingerprint hex>-<pid>-<start ns hex>`: this process's file names.
    pub(super) stem: String,
    pub(super) max_bytes: u64,
    pub(super) blocks_per_file: usize,
}

impl Shared {
    pub(super) fn index(&self) -> MutexGuard<'_, Index> {
        match self.index.lock() {
            Ok(i) => i,
            Err(p) => p.into_inner(),
        }
    }

    /// Index the directory's new files (warning about refused ones on stderr: a few named,
    /// the rest counted) and forget vanished ones, then trim to the budget: after each
    /// write too, so that several processes on one directory keep it within the budget.
    pub(super) fn scan(&self) -> std::io::Result<()> {
        let report = {
            let mut index = self.index();
            let report = index.scan(&self.dir, &self.prefix, &self.geometry)?;
            // Over budget already (a smaller --kv-offload-size than last time, or several
            // processes on one directory): trim now, not at the next write.
            self.evict(&mut index);
            report
        };
        let dir = self.dir.display();
        for r in report.rejected.iter().take(REJECTIONS_SHOWN) {
            match &r.not_removed {
                None => eprintln!(
                    "warning: --kv-offload-dir {dir}: skipped and removed {}: {}",
                    r.name, r.reason
                ),
                Some(e) => eprintln!(
                    "warning: --kv-offload-dir {dir}: skipped {}: {} (could not remove it: {e})",
                    r.name, r.reason
                ),
            }
        }
        if report.rejected.len() > REJECTIONS_SHOWN {
            eprintln!(
                "warning: --kv-offload-dir {dir}: skipped {} more damaged or foreign files",
                report.rejected.len() - REJECTIONS_SHOWN
            );
        }
        self.stats
            .files_rejected
            .fetch_add(report.rejected.len() as u64, Relaxed);
        Ok(())
    }

    /// Delete files until the directory fits the budget ([`Index::over_budget`]'s order).
    pub(super) fn evict(&self, index: &mut Index) {
        for id in index.over_budget(self.max_bytes) {
            if let Some(f) = index.drop_file(id) {
                let _ = std::fs::remove_file(&f.path);
                self.stats.files_evicted.fetch_add(1, Relaxed);
            }
        }
    }
}
