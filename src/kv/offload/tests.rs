//! The disk tier on its own: round trips across a reopen (a restart), damaged files refused
//! and removed, the byte budget's LRU, two tiers on one directory, crash leftovers.
use super::*;
use crate::kv::{KernelClass, ROOT_HASH};

const BLOCK_BYTES: usize = 96;

fn config(dir: &std::path::Path, fp: &str, max_bytes: u64) -> OffloadConfig {
    OffloadConfig {
        dir: dir.to_path_buf(),
        max_bytes,
        fingerprint: Fingerprint::of(&[("test", fp.to_string())]),
    }
}

fn open(c: &OffloadConfig) -> OffloadTier {
    OffloadTier::open(c, BLOCK_BYTES, 2).expect("open")
}

/// A chain of `n` keys (block i's parent is block i − 1) starting at token `t0`.
fn chain(n: usize, t0: u32) -> Vec<BlockKey> {
    let mut parent = ROOT_HASH;
    (0..n as u32)
        .map(|i| {
            let k = BlockKey {
                parent,
                group: 0,
                class: KernelClass::Prompt,
                tokens: vec![t0 + 2 * i, t0 + 2 * i + 1],
            };
            parent = k.hash();
            k
        })
        .collect()
}

fn bytes_of(k: &BlockKey) -> Vec<u8> {
    (0..BLOCK_BYTES)
        .map(|i| (k.tokens[0] as usize * 7 + i) as u8)
        .collect()
}

fn kvb_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "kvb"))
        .collect();
    v.sort();
    v
}

fn store_all(t: &OffloadTier, keys: &[BlockKey]) {
    for k in keys {
        assert!(t.wants(k));
        t.store(k.clone(), bytes_of(k));
    }
    t.flush();
}

#[test]
fn blocks_read_back_after_a_reopen_and_a_key_must_match_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), "a", 1 << 30);
    let keys = chain(5, 100);
    {
        let t = open(&c);
        store_all(&t, &keys);
        assert!(!t.wants(&keys[0]), "a written key is not written twice");
        let s = t.stats();
        assert_eq!((s.blocks_written, s.blocks_on_disk), (5, 5));
    }
    let mut t = open(&c);
    let mut out = vec![0u8; BLOCK_BYTES];
    for k in &keys {
        assert!(t.contains(k));
        assert!(t.load(k, &mut out));
        assert_eq!(out, bytes_of(k));
    }
    // Same tokens after another parent, another group or class: misses.
    let mut other = keys[1].clone();
    other.parent = ROOT_HASH;
    assert!(!t.contains(&other) && !t.load(&other, &mut out));
    let mut other = keys[1].clone();
    other.group = 1;
    assert!(!t.contains(&other));
    let mut other = keys[1].clone();
    other.class = KernelClass::QuantizedPrompt;
    assert!(!t.contains(&other));
    assert_eq!(t.stats().bytes_read, 5 * BLOCK_BYTES as u64);
}

#[test]
fn another_fingerprint_never_hits_and_its_files_stay() {
    let dir = tempfile::tempdir().unwrap();
    let keys = chain(3, 0);
    store_all(&open(&config(dir.path(), "f16", 1 << 30)), &keys);
    let n = kvb_files(dir.path()).len();
    let t = open(&config(dir.path(), "q8_0", 1 << 30));
    assert!(keys.iter().all(|k| !t.contains(k)));
    assert_eq!(
        kvb_files(dir.path()).len(),
        n,
        "other settings' files are kept"
    );
    assert!(t.stats().bytes_on_disk > 0, "but counted toward the budget");
    assert_eq!(t.stats().files_rejected, 0);
}

#[test]
fn a_corrupt_block_is_a_miss_and_its_file_goes() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), "a", 1 << 30);
    let keys = chain(4, 0);
    store_all(&open(&c), &keys);
    let files = kvb_files(dir.path());
    assert_eq!(files.len(), 1, "one batch, one file");
    let mut b = std::fs::read(&files[0]).unwrap();
    let last = b.len() - 1;
    b[last] ^= 1; // the last block's last byte
    std::fs::write(&files[0], &b).unwrap();
    let mut t = open(&c);
    assert!(t.contains(&keys[3]), "entries are intact: indexed");
    let mut out = vec![0u8; BLOCK_BYTES];
    assert!(!t.load(&keys[3], &mut out));
    assert!(!files[0].exists(), "the file is removed");
    assert!(!t.contains(&keys[0]), "with every block in it");
    assert_eq!(t.stats().files_rejected, 1);
}

#[test]
fn truncated_and_foreign_files_are_skipped_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), "a", 1 << 30);
    let keys = chain(4, 0);
    store_all(&open(&c), &keys);
    let files = kvb_files(dir.path());
    let b = std::fs::read(&files[0]).unwrap();
    std::fs::write(&files[0], &b[..b.len() - 10]).unwrap();
    // A file of other settings renamed to look like ours; junk under our prefix.
    let other = tempfile::tempdir().unwrap();
    store_all(&open(&config(other.path(), "b", 1 << 30)), &chain(2, 50));
    let ours = c.fingerprint.hex();
    let foreign = dir.path().join(format!("{ours}-1-1-0.kvb"));
    std::fs::copy(&kvb_files(other.path())[0], &foreign).unwrap();
    let junk = dir.path().join(format!("{ours}-1-1-1.kvb"));
    std::fs::write(&junk, b"not a block file").unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, b"left alone").unwrap();
    let t = open(&c);
    assert_eq!(t.stats().files_rejected, 3);
    assert!(!files[0].exists() && !foreign.exists() && !junk.exists());
    assert!(
        notes.exists(),
        "files that are not the tier's are never touched"
    );
    assert!(keys.iter().all(|k| !t.contains(k)));
}

/// Bytes of a file of one block.
fn one_block_file() -> u64 {
    format::file_len(
        &format::Geometry {
            fingerprint: 0,
            block_bytes: BLOCK_BYTES as u64,
            block_size: 2,
        },
        1,
    )
}

#[test]
fn the_budget_evicts_the_least_recently_used_chain_tail_first() {
    let dir = tempfile::tempdir().unwrap();
    // One block per file (a budget / 8 below one block), room for three files.
    let c = config(dir.path(), "a", 3 * one_block_file());
    let (a, b, c3) = (chain(3, 0), chain(1, 1000), chain(2, 5000));
    let mut t = open(&c);
    let mut out = vec![0u8; BLOCK_BYTES];
    store_all(&t, &a[..2]);
    store_all(&t, &b);
    // Use chain a again (head first, as a lookup reads): b is the least recently used.
    std::thread::sleep(Duration::from_millis(5));
    assert!(t.load(&a[0], &mut out) && t.load(&a[1], &mut out));
    store_all(&t, &c3[..1]);
    assert!(!t.contains(&b[0]), "the least recently used chain goes");
    // Over again: a is now the older chain, and its tail goes, not its head (read last).
    store_all(&t, &c3[1..]);
    assert!(!t.contains(&a[1]) && t.contains(&a[0]), "tail first");
    // a's next block, written after a[1] went: its chain's head is not all on disk, so
    // it is the first to go.
    store_all(&t, &a[2..]);
    assert!(!t.contains(&a[2]));
    assert!(t.contains(&a[0]) && t.contains(&c3[0]) && t.contains(&c3[1]));
    assert_eq!(kvb_files(dir.path()).len(), 3);
    let s = t.stats();
    assert_eq!(
        (s.files_evicted, s.bytes_on_disk),
        (3, 3 * one_block_file())
    );
}

#[test]
fn a_prompt_longer_than_the_budget_keeps_its_head() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), "a", 3 * one_block_file());
    let keys = chain(6, 0);
    {
        let t = open(&c);
        for k in &keys {
            store_all(&t, std::slice::from_ref(k));
        }
        let on_disk: Vec<bool> = keys.iter().map(|k| t.contains(k)).collect();
        assert_eq!(on_disk, [true, true, true, false, false, false]);
    }
    // And after a restart (the order comes back from the mtimes and the chain), a new
    // prompt evicts the old one from its tail.
    let t = open(&c);
    store_all(&t, &chain(1, 5000));
    let on_disk: Vec<bool> = keys[..3].iter().map(|k| t.contains(k)).collect();
    assert_eq!(on_disk, [true, true, false]);
}

#[test]
fn a_chain_cut_from_its_head_goes_first_however_it_grows() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), "a", 3 * one_block_file());
    let (a, b) = (chain(4, 0), chain(2, 1000));
    let t = open(&c);
    for k in &a[..3] {
        store_all(&t, std::slice::from_ref(k));
    }
    // a[1]'s file deleted by hand: a[2] no longer reaches a[0] on disk.
    let files = kvb_files(dir.path());
    std::fs::remove_file(&files[1]).unwrap();
    store_all(&t, &b[..1]); // the writer rescans: a[1] is forgotten
    assert!(!t.contains(&a[1]));
    // a[3] grows the cut chain (its own parent is on disk); over budget, the cut chain
    // goes first, tail first, then the rest of it — never a[0] or b.
    store_all(&t, &a[3..]);
    assert!(!t.contains(&a[3]) && t.contains(&a[2]));
    store_all(&t, &b[1..]);
    assert!(!t.contains(&a[2]));
    assert!(t.contains(&a[0]) && t.contains(&b[0]) && t.contains(&b[1]));
}

#[test]
fn two_processes_keep_one_directory_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), "a", 3 * one_block_file());
    let (x, y) = (open(&c), open(&c));
    for k in &chain(2, 0) {
        store_all(&x, std::slice::from_ref(k));
    }
    for k in &chain(2, 1000) {
        store_all(&y, std::slice::from_ref(k));
    }
    let on_disk: u64 = kvb_files(dir.path())
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    assert_eq!(
        on_disk,
        3 * one_block_file(),
        "the second writer saw the first's files"
    );
}

#[test]
fn a_directory_over_budget_is_trimmed_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let keys = chain(4, 0);
    {
        let t = open(&config(dir.path(), "a", 1 << 30));
        for k in &keys {
            store_all(&t, std::slice::from_ref(k));
        }
    }
    let t = open(&config(dir.path(), "a", 2 * one_block_file()));
    assert_eq!(kvb_files(dir.path()).len(), 2, "trimmed before any write");
    assert!(t.contains(&keys[0]) && t.contains(&keys[1]) && !t.contains(&keys[2]));
    assert_eq!(t.stats().files_evicted, 2);
}

#[test]
fn files_not_named_as_the_tiers_are_neither_counted_nor_touched() {
    let dir = tempfile::tempdir().unwrap();
    let mine = ["backup.kvb", "notes.kvb.partial", "0123-1-1-0.kvb"];
    for n in mine {
        std::fs::write(dir.path().join(n), vec![0u8; 4096]).unwrap();
    }
    let c = config(dir.path(), "a", one_block_file());
    let t = open(&c);
    store_all(&t, &chain(1, 0));
    assert_eq!(t.stats().bytes_on_disk, one_block_file());
    assert_eq!(t.stats().files_evicted, 0);
    assert!(mine.iter().all(|n| dir.path().join(n).exists()));
}

#[test]
fn two_tiers_share_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), "a", 1 << 30);
    let mut a = open(&c);
    let mut b = open(&c);
    let (ka, kb) = (chain(2, 0), chain(2, 1000));
    store_all(&a, &ka);
    store_all(&b, &kb);
    a.scan().unwrap();
    b.scan().unwrap();
    let mut out = vec![0u8; BLOCK_BYTES];
    for k in ka.iter().chain(&kb) {
        assert!(a.load(k, &mut out) && b.load(k, &mut out));
        assert_eq!(out, bytes_of(k));
    }
    // A file the other process deleted: a plain miss, nothing rejected.
    for f in kvb_files(dir.path()) {
        std::fs::remove_file(f).unwrap();
    }
    a.open = None;
    assert!(!a.load(&kb[0], &mut out));
    assert_eq!(a.stats().files_rejected, 0);
}

#[test]
fn a_dead_writers_partial_file_is_removed_a_live_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), "a", 1 << 30);
    let hex = c.fingerprint.hex();
    // No process has pid 0x7fffffff (above pid_max); this process is alive.
    let dead = dir.path().join(format!("{hex}-2147483647-1-0.kvb.partial"));
    let live = dir
        .path()
        .join(format!("{hex}-{}-1-0.kvb.partial", std::process::id()));
    // A live pid on a file untouched for an hour: a reused pid, a leftover.
    let stale = dir
        .path()
        .join(format!("{hex}-{}-2-0.kvb.partial", std::process::id()));
    std::fs::write(&dead, b"half").unwrap();
    std::fs::write(&live, b"half").unwrap();
    std::fs::write(&stale, b"half").unwrap();
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    File::options()
        .write(true)
        .open(&stale)
        .and_then(|f| f.set_modified(hour_ago))
        .unwrap();
    let t = open(&c);
    assert!(!dead.exists() && live.exists() && !stale.exists());
    assert_eq!(t.stats().blocks_on_disk, 0);
}
