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
//! Eviction order: least recently used first, where a file holding a block's parent counts
//! as used at least as recently as the block's own file ([`Index::lift_ancestors`]), so a
//! prompt's last blocks go before its first — a chain whose head is gone can never hit,
//! as vLLM frees a request's blocks tail first for the same reason.
use super::format::{self, Entry, Geometry, HEADER_BYTES};
use crate::kv::{BlockKey, ROOT_HASH};
use std::collections::{BTreeMap, HashMap, HashSet};
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
    max_group: u32,
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

    /// The files to delete so that the files fit in `max_bytes`: first those holding a
    /// block whose chain does not reach the first block on disk ([`Self::reachable`]: it
    /// hits only while the pool holds the missing part), then the least recently used.
    pub fn over_budget(&self, max_bytes: u64) -> Vec<u64> {
        if self.total_bytes <= max_bytes {
            return Vec::new();
        }
        let reachable = self.reachable();
        let mut order: BTreeMap<(bool, u128, u64), u64> = BTreeMap::new();
        for (&id, f) in &self.files {
            let whole = f.keys.iter().all(|(h, _)| reachable.contains(h));
            order.insert((whole, f.last_used, id), id);
        }
        let mut total = self.total_bytes;
        let mut out = Vec::new();
        for (_, id) in order {
            if total <= max_bytes {
                break;
            }
            total -= self.files[&id].bytes;
            out.push(id);
        }
        out
    }

    /// Chain hashes on disk whose every ancestor is on disk too (in some layer group; a
    /// sliding-window group need not keep a prompt's early blocks), up to [`ROOT_HASH`].
    /// Each hash is visited once; a loop of hashes (a forged file) counts as unreachable.
    pub fn reachable(&self) -> HashSet<u128> {
        let mut parent_of: HashMap<u128, u128> = HashMap::with_capacity(self.blocks.len());
        for ((h, _), s) in &self.blocks {
            parent_of.insert(*h, s.key.parent);
        }
        let mut known: HashMap<u128, bool> = HashMap::with_capacity(parent_of.len());
        for &start in parent_of.keys() {
            let mut path = Vec::new();
            let mut h = start;
            let ok = loop {
                if h == ROOT_HASH {
                    break true;
                }
                if let Some(&k) = known.get(&h) {
                    break k;
                }
                let Some(&p) = parent_of.get(&h) else {
                    break false;
                };
                if path.len() > parent_of.len() {
                    break false;
                }
                path.push(h);
                h = p;
            };
            for h in path {
                known.insert(h, ok);
            }
        }
        known
            .into_iter()
            .filter(|&(_, ok)| ok)
            .map(|(h, _)| h)
            .collect()
    }

    /// Files other than `id` holding a parent of one of `id`'s blocks, in any layer group
    /// (a hit needs every group's blocks, so they age together).
    fn parent_files(&self, id: u64) -> Vec<u64> {
        let Some(f) = self.files.get(&id) else {
            return Vec::new();
        };
        let mut out: Vec<u64> = f
            .keys
            .iter()
            .filter_map(|k| self.blocks.get(k))
            .flat_map(|s| {
                (0..=self.max_group).filter_map(move |g| self.blocks.get(&(s.key.parent, g)))
            })
            .map(|s| s.file)
            .filter(|&p| p != id)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Mark file `id` used at `now` (ns since the epoch) and every file holding an
    /// ancestor of its blocks used later, one nanosecond per step up the chain (see the
    /// module's eviction order). The walk stops where a file is already more recent, and
    /// after a bounded number of steps (a hostile directory cannot make it loop).
    pub fn touch(&mut self, id: u64, now: u128) {
        if let Some(f) = self.files.get_mut(&id) {
            f.last_used = f.last_used.max(now);
        }
        self.lift_ancestors(id);
    }

    /// Make the files holding ancestors of `id`'s blocks at least one nanosecond per step
    /// more recently used than `id` (see [`Self::touch`]).
    pub fn lift_ancestors(&mut self, id: u64) {
        let mut frontier = vec![id];
        let mut steps = 0usize;
        let limit = 4 * self.files.len() + 64;
        while let Some(child) = frontier.pop() {
            let Some(t) = self.files.get(&child).map(|f| f.last_used + 1) else {
                continue;
            };
            for p in self.parent_files(child) {
                steps += 1;
                if steps > limit {
                    return;
                }
                if let Some(f) = self.files.get_mut(&p) {
                    if f.last_used < t {
                        f.last_used = t;
                        frontier.push(p);
                    }
                }
            }
        }
    }

    /// Index the files of `dir` not indexed yet, and forget indexed ones that are gone.
    /// This fingerprint's files (`prefix`) are read and checked ([`format`]); a bad one is
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

/// Read and check a file's header and entries (see [`format`]); the reason on failure.
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
