//! The disk tier's in-memory index: which file holds each block of this process's
//! fingerprint, every file of the directory with its size and last use (the LRU the byte
//! budget evicts from), and the scan that builds it from the directory.
//!
//! File names: `<fingerprint hex>-<pid>-<start ns hex>-<n>.kvb` for a finished file,
//! `<same>.partial` while it is written (renamed when complete, so a reader never sees a
//! half-written `.kvb`). Files of other fingerprints (another model, dtype, build) count
//! toward the budget and are evicted by age, never read. Other names (anything not
//! `<32 hex digits>-….kvb`) are left alone and not counted.
//!
//! The eviction order is [`super::eviction`]'s.
use super::format::{self, Entry, Geometry, HEADER_BYTES};
use crate::kv::BlockKey;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where a block lives.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The file's id in [`Index::files`].
    pub file: u64,
    /// Byte offset of its data.
    pub offset: u64,
    /// XXH3-64 of its bytes.
    pub checksum: u64,
    /// Its full key (compared on every lookup: a hash match alone is not a hit).
    pub key: BlockKey,
}

/// One file of the directory.
#[derive(Debug, Clone)]
pub struct FileEntry {
    /// Its path.
    pub path: PathBuf,
    /// Its length in bytes.
    pub bytes: u64,
    /// When it was last written or read (ns since the epoch; its mtime at the scan).
    pub last_used: u128,
    /// Keys of this fingerprint it holds (empty for another fingerprint's file).
    pub keys: Vec<(u128, u32)>,
}

/// The index.
#[derive(Debug, Default)]
pub struct Index {
    /// Files by id.
    pub files: HashMap<u64, FileEntry>,
    /// File ids by name (the scan skips names it knows).
    pub by_name: HashMap<String, u64>,
    /// (chain hash, group) → where the block is.
    pub blocks: HashMap<(u128, u32), Slot>,
    /// Keys handed to the writer and not written yet (a second store is skipped).
    pub pending: HashSet<(u128, u32)>,
    /// Sum of [`FileEntry::bytes`].
    pub total_bytes: u64,
    /// Names of our files that were refused but could not be removed (warned about once).
    pub refused: HashSet<String>,
    /// The highest layer group of any indexed block (parents are looked up in each group).
    pub(super) max_group: u32,
    next_id: u64,
}

/// A file the scan refused.
#[derive(Debug)]
pub struct Rejected {
    /// Its name.
    pub name: String,
    /// What is wrong with it.
    pub reason: String,
    /// Why it could not be removed (None: it was).
    pub not_removed: Option<String>,
}

/// What a scan did, for the stats and the warnings.
#[derive(Debug, Default)]
pub struct ScanReport {
    /// Files of this fingerprint indexed.
    pub indexed: usize,
    /// Files refused, each reported once.
    pub rejected: Vec<Rejected>,
    /// Ids of the files indexed by this scan (ours and other fingerprints').
    pub added: Vec<u64>,
}

/// A `.partial` file untouched this long is a leftover even when a process with its
/// writer's pid runs (pids are reused): a writer writes its file in one go.
const PARTIAL_STALE: std::time::Duration = std::time::Duration::from_secs(600);

/// Whether `name` is a finished file of the tier (any fingerprint): `<32 lowercase hex
/// digits>-….kvb`.
pub fn is_tier_file(name: &str) -> bool {
    let b = name.as_bytes();
    name.is_ascii()
        && name.ends_with(".kvb")
        && b.len() > 33
        && b[32] == b'-'
        && b[..32]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// Nanoseconds since the epoch of `t` (0 before it).
pub fn nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

impl Index {
    /// The slot of exactly `key` (hash, group and every field compared).
    pub fn find(&self, key: &BlockKey) -> Option<&Slot> {
        self.blocks
            .get(&(key.hash(), key.group))
            .filter(|s| s.key == *key)
    }

    /// Add a finished file of this fingerprint: `entries` at their offsets.
    pub fn add_file(
        &mut self,
        path: PathBuf,
        bytes: u64,
        last_used: u128,
        g: &Geometry,
        entries: Vec<Entry>,
    ) -> u64 {
        let id = self.add_foreign(path, bytes, last_used);
        let n = entries.len();
        if let Some(g) = entries.iter().map(|e| e.key.group).max() {
            self.max_group = self.max_group.max(g);
        }
        let mut keys = Vec::with_capacity(n);
        for (i, e) in entries.into_iter().enumerate() {
            let k = (e.key.hash(), e.key.group);
            if self.blocks.contains_key(&k) {
                continue; // another file holds it already
            }
            keys.push(k);
            self.blocks.insert(
                k,
                Slot {
                    file: id,
                    offset: format::data_offset(g, n, i),
                    checksum: e.checksum,
                    key: e.key,
                },
            );
        }
        if let Some(f) = self.files.get_mut(&id) {
            f.keys = keys;
        }
        id
    }

    /// Add a file that is not read (another fingerprint's): it counts toward the budget.
    pub fn add_foreign(&mut self, path: PathBuf, bytes: u64, last_used: u128) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let name = file_name(&path);
        self.by_name.insert(name, id);
        self.total_bytes += bytes;
        self.files.insert(
            id,
            FileEntry {
                path,
                bytes,
                last_used,
                keys: Vec::new(),
            },
        );
        id
    }

    /// Forget file `id` and its blocks (the caller deletes it from disk, or it is gone).
    pub fn drop_file(&mut self, id: u64) -> Option<FileEntry> {
        let f = self.files.remove(&id)?;
        self.by_name.remove(&file_name(&f.path));
        self.total_bytes -= f.bytes;
        for k in &f.keys {
            if self.blocks.get(k).is_some_and(|s| s.file == id) {
                self.blocks.remove(k);
            }
        }
        Some(f)
    }

    /// Index the files of `dir` not indexed yet, and forget indexed ones that are gone.
    /// This fingerprint's files (`prefix`) are read and checked ([`mod@format`]); a bad one is
    /// removed and reported. A `.partial` file whose writer process no longer runs is
    /// removed (a crash mid-write). Errors reading the directory itself end the scan.
    pub fn scan(&mut self, dir: &Path, prefix: &str, g: &Geometry) -> std::io::Result<ScanReport> {
        let mut report = ScanReport::default();
        let mut seen = HashSet::new();
        for e in std::fs::read_dir(dir)?.flatten() {
            let path = e.path();
            // The tier's names are ASCII: any other name is not ours, and not counted.
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_string)
            else {
                continue;
            };
            if name.ends_with(".partial") {
                let stale = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|a| a > PARTIAL_STALE));
                let ours = name.strip_suffix(".partial").is_some_and(is_tier_file);
                if ours && (stale || writer_is_gone(&name)) {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            if !is_tier_file(&name) {
                continue;
            }
            seen.insert(name.clone());
            if self.by_name.contains_key(&name) {
                continue;
            }
            let Ok(meta) = e.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let mtime = meta.modified().map(nanos).unwrap_or(0);
            if !name.starts_with(prefix) {
                report.added.push(self.add_foreign(path, meta.len(), mtime));
                continue;
            }
            match read_head(&path, g, meta.len()) {
                Ok(entries) => {
                    report
                        .added
                        .push(self.add_file(path, meta.len(), mtime, g, entries));
                    report.indexed += 1;
                }
                // A file that vanished meanwhile (another process's budget) is no news.
                Err(_) if !path.exists() => {}
                Err(reason) => {
                    let not_removed = std::fs::remove_file(&path).err().map(|e| e.to_string());
                    if not_removed.is_some() {
                        // Counted toward the budget, never read; reported once.
                        self.add_foreign(path, meta.len(), mtime);
                        if !self.refused.insert(name.clone()) {
                            continue;
                        }
                    }
                    report.rejected.push(Rejected {
                        name,
                        reason,
                        not_removed,
                    });
                }
            }
        }
        // Carry the eviction order of chains over from the files' mtimes, oldest first.
        let mut added: Vec<(u128, u64)> = report
            .added
            .iter()
            .filter_map(|id| self.files.get(id).map(|f| (f.last_used, *id)))
            .collect();
        added.sort_unstable();
        for (_, id) in added {
            self.lift_ancestors(id);
        }
        let gone: Vec<u64> = self
            .by_name
            .iter()
            .filter(|(n, _)| !seen.contains(*n))
            .map(|(_, &id)| id)
            .collect();
        for id in gone {
            self.drop_file(id);
        }
        Ok(report)
    }
}

/// A path's file name as text ("" when it has none).
pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Read and check a file's header and entries (see [`mod@format`]); the reason on failure.
pub fn read_head(path: &Path, g: &Geometry, len: u64) -> Result<Vec<Entry>, String> {
    let f = File::open(path).map_err(|e| e.to_string())?;
    let mut head = [0u8; HEADER_BYTES];
    f.read_exact_at(&mut head, 0)
        .map_err(|_| format!("{len} bytes: shorter than a header"))?;
    let (n, sum) = format::parse_header(&head, g, len).map_err(|e| e.to_string())?;
    let mut section = vec![0u8; n * format::entry_bytes(g.block_size)];
    f.read_exact_at(&mut section, HEADER_BYTES as u64)
        .map_err(|e| e.to_string())?;
    format::parse_entries(&section, g, n, sum).map_err(|e| e.to_string())
}

/// Whether the process that was writing `name` (`…-<pid>-….partial`) has ended, so its
/// partial file is a crash's leftover. Unknown pids count as gone; our own as running (a
/// pid reused by another process counts as running: the scan's age limit covers that).
fn writer_is_gone(name: &str) -> bool {
    let pid = name.split('-').nth(1).and_then(|p| p.parse::<u32>().ok());
    match pid {
        Some(p) if p == std::process::id() => false,
        Some(p) => !Path::new(&format!("/proc/{p}")).exists(),
        None => true,
    }
}
