//! The disk tier's writer thread: blocks handed over by the engine are batched into files
//! (whatever is queued, up to [`super::OffloadTier`]'s per-file limit), each written under a
//! `.partial` name and renamed when complete, then indexed; files past the byte budget are
//! deleted, least recently used first.
use super::format::{self, Entry};
use super::index::nanos;
use super::shared::Shared;
use crate::kv::BlockKey;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::SystemTime;
use xxhash_rust::xxh3::xxh3_64;

/// What the engine thread sends.
pub enum Job {
    /// A cached block's key and bytes ([`crate::kv::KvPool::block_bytes_out`]).
    Block(BlockKey, Vec<u8>),
    /// Answer once everything sent before is on disk.
    Flush(Sender<()>),
}

/// The fault-injection point of the crash tests: with `NANOLLM_OFFLOAD_FAULT=abort-mid-write`
/// in the environment the process aborts (no destructors, no flush: as `kill -9`) after
/// writing half of a file's blocks, leaving a `.partial` file behind.
pub const FAULT_ENV: &str = "NANOLLM_OFFLOAD_FAULT";

/// The thread's loop: until every sender is gone.
pub fn run(rx: Receiver<Job>, shared: Arc<Shared>) {
    let abort_mid_write = std::env::var(FAULT_ENV).is_ok_and(|v| v == "abort-mid-write");
    let mut files = 0u64;
    while let Ok(job) = rx.recv() {
        let mut batch = Vec::new();
        let mut acks = Vec::new();
        let mut next = Some(job);
        while let Some(job) = next.take() {
            match job {
                Job::Block(k, b) => batch.push((k, b)),
                Job::Flush(ack) => acks.push(ack),
            }
            if batch.len() >= shared.blocks_per_file || !acks.is_empty() {
                break;
            }
            next = rx.try_recv().ok();
        }
        if !batch.is_empty() {
            write(&shared, batch, files, abort_mid_write);
            files += 1;
        }
        for a in acks {
            let _ = a.send(());
        }
    }
}

/// Write `batch` as one file, index it, keep the directory within the budget.
fn write(shared: &Shared, batch: Vec<(BlockKey, Vec<u8>)>, n: u64, abort_mid_write: bool) {
    let entries: Vec<Entry> = batch
        .iter()
        .map(|(k, b)| Entry {
            key: k.clone(),
            checksum: xxh3_64(b),
        })
        .collect();
    let name = format!("{}-{n}.kvb", shared.stem);
    let path = shared.dir.join(&name);
    let partial = shared.dir.join(format!("{name}.partial"));
    let written = (|| -> std::io::Result<u64> {
        let f = std::fs::File::create_new(&partial)?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        w.write_all(&format::encode_head(&shared.geometry, &entries))?;
        for (i, (_, bytes)) in batch.iter().enumerate() {
            if abort_mid_write && i == batch.len() / 2 {
                w.flush()?;
                std::process::abort();
            }
            w.write_all(bytes)?;
        }
        w.flush()?;
        drop(w);
        std::fs::rename(&partial, &path)?;
        Ok(format::file_len(&shared.geometry, entries.len()))
    })();
    let mut index = match shared.index.lock() {
        Ok(i) => i,
        Err(p) => p.into_inner(),
    };
    for (k, _) in &batch {
        index.pending.remove(&(k.hash(), k.group));
    }
    let bytes = match written {
        Ok(b) => b,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            shared.stats.write_errors.fetch_add(1, Relaxed);
            shared
                .stats
                .writes_dropped
                .fetch_add(batch.len() as u64, Relaxed);
            if shared.stats.write_errors.load(Relaxed) == 1 {
                eprintln!(
                    "warning: --kv-offload-dir {}: cannot write {name}: {e} (blocks not offloaded; further errors counted, not shown)",
                    shared.dir.display()
                );
            }
            return;
        }
    };
    let g = shared.geometry;
    let id = index.add_file(
        PathBuf::from(&path),
        bytes,
        nanos(SystemTime::now()),
        &g,
        entries,
    );
    index.lift_ancestors(id);
    shared.stats.files_written.fetch_add(1, Relaxed);
    shared
        .stats
        .blocks_written
        .fetch_add(batch.len() as u64, Relaxed);
    shared.stats.bytes_written.fetch_add(bytes, Relaxed);
    drop(index);
    // Pick up what other processes wrote (and trim with their files counted).
    if shared.scan().is_err() {
        let mut index = shared.index();
        shared.evict(&mut index);
    }
}
