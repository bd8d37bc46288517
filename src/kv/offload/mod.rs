//! [`OffloadTier`]: the prefix cache's disk tier (`--kv-offload-dir DIR --kv-offload-size
//! BYTES`), below the block pool: KV blocks of full prompt blocks kept in files, so that a
//! prefix evicted from the pool, or computed by an earlier process, is read back instead of
//! prefilled again (vLLM's offloading connector and LMCache keep KV in host memory and on
//! disk; on a CPU the pool already is host memory, so the next tier is disk).
//!
//! - **Write policy: write-through.** When the engine files a block in the prefix cache
//!   ([`crate::kv::KvPool::cache_block`]) its bytes are copied and handed to a writer thread
//!   ([`writer`]) unless the tier holds or is writing that key already; the writer batches
//!   what is queued into one file. The queue holds at most [`OffloadTier::queue_blocks`]
//!   blocks: a block that does not fit is dropped (counted, the engine never waits). So an
//!   evicted block is already on disk, a restart after SIGTERM finds every block written
//!   (the owner calls [`OffloadTier::flush`] on the way out), and even `kill -9` loses only
//!   the queue.
//! - **Reads** happen in the engine thread at a prefix lookup that misses the pool: the
//!   block's bytes are read into a free pool block and checked against their XXH3-64.
//! - **Keys** are the prefix cache's XXH3-128 hash chain plus the block's tokens, compared
//!   on every hit, in files named by the [`Fingerprint`] of the settings: nothing computed
//!   under another model file, dtype, block size, kernel path or version is read.
//! - **Budget**: files are deleted least recently used first (by last write or read; the
//!   files' mtimes carry that order across restarts) once the directory's `.kvb` files,
//!   every fingerprint's, pass `--kv-offload-size` — checked after each write and each
//!   scan. A file holding a block's parent counts as used with it, so a prompt's last
//!   blocks go before its first, and files whose chain no longer reaches its first block
//!   on disk go first ([`index`]). The writer rescans the directory after each file, so
//!   several processes on one directory keep it within the budget together.
//! - **Crash safety**: a file is written as `….partial` and renamed when complete; a
//!   truncated, corrupt or foreign file is skipped with a warning, removed, and its blocks
//!   are misses ([`mod@format`]); a `.partial` whose writer died is removed. A block that fails
//!   its checksum at a read removes its file too; the pool writes that file's other blocks
//!   again when it holds them (those read before the bad one, say: [`OffloadTier::take_lost`]),
//!   and the blocks computed in place of the rest are written through as new ones.
//! - **Two processes on one DIR**: names carry the writer's pid and start time, renames
//!   are atomic, each process rescans the directory (at most once a second, when its mtime
//!   changed) and treats a file another process deleted as a miss.
pub mod eviction;
pub mod fingerprint;
pub mod format;
pub mod index;
pub mod shared;
pub mod stats;
pub mod writer;

pub use fingerprint::{model_digest, Fingerprint};
use shared::Shared;
use stats::Counters;
pub use stats::OffloadStats;

use crate::kv::BlockKey;
use anyhow::{Context, Result};
use format::Geometry;
use index::{nanos, Index};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};
use xxhash_rust::xxh3::xxh3_64;

/// How the tier is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadConfig {
    /// The directory (`--kv-offload-dir`); created when missing.
    pub dir: PathBuf,
    /// Most bytes of `.kvb` files kept in it (`--kv-offload-size`).
    pub max_bytes: u64,
    /// What the blocks are computed under.
    pub fingerprint: Fingerprint,
}

/// The disk tier of one engine.
pub struct OffloadTier {
    shared: Arc<Shared>,
    tx: Option<SyncSender<writer::Job>>,
    writer: Option<JoinHandle<()>>,
    queue_blocks: usize,
    last_scan: Instant,
    dir_mtime: Option<SystemTime>,
    /// The last file read, kept open.
    open: Option<(u64, File)>,
    /// Keys of the other blocks of files dropped by a failed read, for the pool to write
    /// again those it holds ([`Self::take_lost`]).
    lost: Vec<BlockKey>,
}

impl std::fmt::Debug for OffloadTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffloadTier")
            .field("dir", &self.shared.dir)
            .field("fingerprint", &self.shared.prefix)
            .finish()
    }
}

/// Most bytes of block copies waiting for the writer.
const QUEUE_BYTES: usize = 256 << 20;

impl OffloadTier {
    /// Open (creating it when missing) the tier in `config.dir` for pool blocks of
    /// `block_bytes` bytes and `block_size` tokens, index its files of this fingerprint (a
    /// bad one is removed with a warning on stderr), and start the writer.
    ///
    /// Errors: the directory cannot be created or listed, or the writer thread cannot start;
    /// each names `--kv-offload-dir` and the path.
    pub fn open(
        config: &OffloadConfig,
        block_bytes: usize,
        block_size: usize,
    ) -> Result<OffloadTier> {
        let dir = config.dir.clone();
        let flag = || format!("--kv-offload-dir {}", dir.display());
        std::fs::create_dir_all(&dir).with_context(flag)?;
        let block_bytes = block_bytes.max(1);
        let queue_blocks = (QUEUE_BYTES / block_bytes).clamp(4, 1024);
        // A file is at most an eighth of the budget (so eviction is fine-grained) and at most
        // 64 blocks.
        let blocks_per_file = ((config.max_bytes / 8) / block_bytes as u64).clamp(1, 64) as usize;
        let start = nanos(SystemTime::now());
        let hex = config.fingerprint.hex();
        let shared = Arc::new(Shared {
            index: Mutex::new(Index::default()),
            stats: Counters::default(),
            geometry: Geometry {
                fingerprint: config.fingerprint.value,
                block_bytes: block_bytes as u64,
                block_size: block_size as u32,
            },
            prefix: format!("{hex}-"),
            stem: format!("{hex}-{}-{start:x}", std::process::id()),
            dir: dir.clone(),
            max_bytes: config.max_bytes,
            blocks_per_file,
        });
        let (tx, rx) = mpsc::sync_channel(queue_blocks);
        let w = shared.clone();
        let writer = std::thread::Builder::new()
            .name("kv-offload".into())
            .spawn(move || writer::run(rx, w))
            .with_context(flag)?;
        let mut tier = OffloadTier {
            shared,
            tx: Some(tx),
            writer: Some(writer),
            queue_blocks,
            last_scan: Instant::now(),
            dir_mtime: None,
            open: None,
            lost: Vec::new(),
        };
        tier.scan().with_context(flag)?;
        Ok(tier)
    }

    /// Blocks the writer's queue holds at most (`256 MiB / block bytes`, 4 to 1,024).
    pub fn queue_blocks(&self) -> usize {
        self.queue_blocks
    }

    /// The directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.shared.dir
    }

    fn scan(&mut self) -> std::io::Result<()> {
        self.dir_mtime = std::fs::metadata(&self.shared.dir)
            .and_then(|m| m.modified())
            .ok();
        self.last_scan = Instant::now();
        self.shared.scan()
    }

    /// Pick up files other processes wrote (or deleted) since the last look: rescans when a
    /// second has passed and the directory's mtime changed. Errors are ignored (the index
    /// stays as it was).
    pub fn refresh(&mut self) {
        if self.last_scan.elapsed() < Duration::from_secs(1) {
            return;
        }
        let mtime = std::fs::metadata(&self.shared.dir)
            .and_then(|m| m.modified())
            .ok();
        if mtime != self.dir_mtime {
            let _ = self.scan();
        } else {
            self.last_scan = Instant::now();
        }
    }

    /// Whether the tier holds exactly `key` (no read yet).
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.shared.index().find(key).is_some()
    }

    /// Read `key`'s block into `out` (exactly the block's bytes). False on a miss; a block
    /// whose file is gone is forgotten; one that fails its checksum (or cannot be read)
    /// is removed with its file, with a warning — never returned.
    pub fn load(&mut self, key: &BlockKey, out: &mut [u8]) -> bool {
        let s = self.shared.clone();
        let Some(slot) = s.index().find(key).cloned() else {
            return false;
        };
        let path = match s.index().files.get(&slot.file) {
            Some(f) => f.path.clone(),
            None => return false,
        };
        if self.open.as_ref().map(|(id, _)| *id) != Some(slot.file) {
            match File::open(&path) {
                Ok(f) => self.open = Some((slot.file, f)),
                Err(_) => {
                    // Deleted by another process's budget, or by hand: a plain miss.
                    s.index().drop_file(slot.file);
                    return false;
                }
            }
        }
        let Some((_, f)) = &self.open else {
            return false;
        };
        let ok = f.read_exact_at(out, slot.offset).is_ok() && xxh3_64(out) == slot.checksum;
        if !ok {
            self.open = None;
            let mut index = s.index();
            if let Some(f) = index.files.get(&slot.file) {
                let lost = f.keys.iter().filter_map(|k| index.blocks.get(k));
                self.lost.extend(
                    lost.filter(|b| b.file == slot.file && b.key != *key)
                        .map(|b| b.key.clone()),
                );
            }
            let removed = match index.drop_file(slot.file) {
                Some(f) => std::fs::remove_file(&f.path).map_err(|e| e.to_string()),
                None => Ok(()),
            };
            s.stats.files_rejected.fetch_add(1, Relaxed);
            let name = index::file_name(&path);
            let why = "a block failed its checksum (truncated or corrupt)";
            match removed {
                Ok(()) => eprintln!(
                    "warning: --kv-offload-dir {}: skipped and removed {name}: {why}",
                    s.dir.display()
                ),
                Err(e) => {
                    index.refused.insert(name.clone());
                    eprintln!(
                        "warning: --kv-offload-dir {}: skipped {name}: {why} (could not remove it: {e})",
                        s.dir.display()
                    )
                }
            }
            return false;
        }
        s.stats.blocks_read.fetch_add(1, Relaxed);
        s.stats.bytes_read.fetch_add(out.len() as u64, Relaxed);
        let mut index = s.index();
        let now = nanos(SystemTime::now());
        if let Some(f) = index.files.get(&slot.file) {
            // Carry the LRU order across restarts: the file's mtime, at most once a second
            // (the scan lifts the parents' files above it again).
            if now.saturating_sub(f.last_used) > 1_000_000_000 {
                if let Ok(h) = File::options().write(true).open(&f.path) {
                    let _ = h.set_modified(SystemTime::now());
                }
            }
        }
        index.touch(slot.file, now);
        true
    }

    /// The keys of the good blocks of the files a failed [`Self::load`] removed since the
    /// last call: the pool writes again those it still holds (read from that file before the
    /// bad block, say), so that a damaged block costs the disk only itself.
    pub fn take_lost(&mut self) -> Vec<BlockKey> {
        std::mem::take(&mut self.lost)
    }

    /// Whether `key` should be handed to [`Self::store`]: not on disk, not queued.
    pub fn wants(&self, key: &BlockKey) -> bool {
        let index = self.shared.index();
        self.tx.is_some()
            && index.find(key).is_none()
            && !index.pending.contains(&(key.hash(), key.group))
    }

    /// Queue `key`'s block (`bytes`, exactly the block) for writing; dropped (and counted)
    /// when the queue is full.
    pub fn store(&self, key: BlockKey, bytes: Vec<u8>) {
        let Some(tx) = &self.tx else { return };
        let k = (key.hash(), key.group);
        self.shared.index().pending.insert(k);
        match tx.try_send(writer::Job::Block(key, bytes)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.shared.index().pending.remove(&k);
                self.shared.stats.writes_dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// Wait until every block queued so far is written (or dropped).
    pub fn flush(&self) {
        let Some(tx) = &self.tx else { return };
        let (ack, done) = mpsc::channel();
        if tx.send(writer::Job::Flush(ack)).is_ok() {
            let _ = done.recv();
        }
    }

    /// The counters.
    pub fn stats(&self) -> OffloadStats {
        let (blocks, bytes) = {
            let i = self.shared.index();
            (i.blocks.len() as u64, i.total_bytes)
        };
        self.shared.stats.snapshot(blocks, bytes)
    }
}

impl Drop for OffloadTier {
    /// Write what is queued, then stop the writer.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests;
