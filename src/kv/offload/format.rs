//! The disk tier's file format: one file holds several KV blocks of one fingerprint
//! (model file, KV dtype, block size, kernels, version: [`super::Fingerprint`]).
//!
//! All integers little-endian. A file is, in order:
//! - **header**, [`HEADER_BYTES`] = 56 bytes: magic `NLKVOFF1` (8), fingerprint (u128, 16),
//!   block bytes (u64), block size in tokens (u32), blocks in the file `n` (u32), XXH3-64 of
//!   the entry section (u64), XXH3-64 of the header's first 48 bytes (u64);
//! - **entries**, `n` × ([`ENTRY_FIXED_BYTES`] + 4 · block size): the block's chain hash
//!   (u128), its parent's hash (u128), its layer group (u32), its kernel class (u8, see
//!   [`KernelClass::code`]), 3 zero bytes, XXH3-64 of the block's bytes (u64), then its
//!   token ids (u32 each);
//! - **data**, `n` × block bytes: each block as [`crate::kv::KvPool::block_bytes_out`] lays
//!   it out.
//!
//! The file's length is exactly what its header says; a shorter or longer file, a bad magic,
//! a checksum that does not match, a fingerprint or geometry other than the reader's, or an
//! entry whose hash is not the hash of its own key is refused (`parse_head`). A block's
//! bytes are checked against their checksum each time they are read.
use crate::kv::prefix_cache::{chain_hash, BlockKey, KernelClass};
use anyhow::{bail, ensure, Result};
use xxhash_rust::xxh3::xxh3_64;

/// The first 8 bytes of every file of the tier.
pub const MAGIC: &[u8; 8] = b"NLKVOFF1";
/// Bytes of the header.
pub const HEADER_BYTES: usize = 56;
/// Bytes of an entry before its token ids.
pub const ENTRY_FIXED_BYTES: usize = 48;
/// Most blocks one file may hold (a header asking for more is refused, so a hostile file
/// cannot make the reader allocate more than this many entries).
pub const MAX_BLOCKS_PER_FILE: usize = 4096;

/// What a file's header says about its blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// The settings fingerprint the blocks were computed under.
    pub fingerprint: u128,
    /// Bytes of one block.
    pub block_bytes: u64,
    /// Tokens per block.
    pub block_size: u32,
}

/// One block's entry: its key and the checksum of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The block's key (parent hash, group, kernel class, tokens).
    pub key: BlockKey,
    /// XXH3-64 of the block's bytes.
    pub checksum: u64,
}

/// Bytes of one entry for blocks of `block_size` tokens.
pub fn entry_bytes(block_size: u32) -> usize {
    ENTRY_FIXED_BYTES + 4 * block_size as usize
}

/// Byte offset of block `i`'s data in a file of `n` blocks.
pub fn data_offset(g: &Geometry, n: usize, i: usize) -> u64 {
    (HEADER_BYTES + n * entry_bytes(g.block_size)) as u64 + i as u64 * g.block_bytes
}

/// Length of a file of `n` blocks.
pub fn file_len(g: &Geometry, n: usize) -> u64 {
    data_offset(g, n, n)
}

/// The header and entries of a file of `entries` blocks (the data follows them).
pub fn encode_head(g: &Geometry, entries: &[Entry]) -> Vec<u8> {
    let mut section = Vec::with_capacity(entries.len() * entry_bytes(g.block_size));
    for e in entries {
        section.extend_from_slice(&e.key.hash().to_le_bytes());
        section.extend_from_slice(&e.key.parent.to_le_bytes());
        section.extend_from_slice(&e.key.group.to_le_bytes());
        section.extend_from_slice(&[e.key.class.code(), 0, 0, 0]);
        section.extend_from_slice(&e.checksum.to_le_bytes());
        for t in &e.key.tokens {
            section.extend_from_slice(&t.to_le_bytes());
        }
    }
    let mut out = Vec::with_capacity(HEADER_BYTES + section.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&g.fingerprint.to_le_bytes());
    out.extend_from_slice(&g.block_bytes.to_le_bytes());
    out.extend_from_slice(&g.block_size.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&xxh3_64(&section).to_le_bytes());
    let sum = xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out.extend_from_slice(&section);
    out
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn u128_at(b: &[u8], at: usize) -> u128 {
    let mut x = [0u8; 16];
    x.copy_from_slice(&b[at..at + 16]);
    u128::from_le_bytes(x)
}

/// Check a header (the first [`HEADER_BYTES`] of a file `file_len` bytes long) against the
/// reader's geometry `want`; returns the number of blocks and the entry section's checksum.
///
/// Errors (each a short reason): a short header, a bad magic or header checksum, another
/// fingerprint, block size or block bytes, more than [`MAX_BLOCKS_PER_FILE`] blocks, a file
/// length other than the header's.
pub fn parse_header(head: &[u8], want: &Geometry, file_len_on_disk: u64) -> Result<(usize, u64)> {
    ensure!(head.len() >= HEADER_BYTES, "shorter than a header");
    ensure!(
        &head[..8] == MAGIC,
        "not a nanollm KV offload file (bad magic)"
    );
    ensure!(
        xxh3_64(&head[..48]) == u64_at(head, 48),
        "header checksum mismatch"
    );
    let g = Geometry {
        fingerprint: u128_at(head, 8),
        block_bytes: u64_at(head, 24),
        block_size: u32_at(head, 32),
    };
    if g.fingerprint != want.fingerprint {
        bail!(
            "computed under other settings (fingerprint {:032x}, expected {:032x})",
            g.fingerprint,
            want.fingerprint
        );
    }
    ensure!(
        g == *want,
        "block geometry {} bytes × {} tokens, expected {} × {}",
        g.block_bytes,
        g.block_size,
        want.block_bytes,
        want.block_size
    );
    let n = u32_at(head, 36) as usize;
    ensure!(
        (1..=MAX_BLOCKS_PER_FILE).contains(&n),
        "{n} blocks (1 to {MAX_BLOCKS_PER_FILE} expected)"
    );
    let expected = file_len(&g, n);
    ensure!(
        file_len_on_disk == expected,
        "{file_len_on_disk} bytes, the header says {expected} (truncated or padded)"
    );
    Ok((n, u64_at(head, 40)))
}

/// The entries of a file of `n` blocks from its entry section (`section`, checked against
/// `checksum`). Errors: a checksum mismatch, an unknown kernel class, an entry whose stored
/// hash is not its key's hash.
pub fn parse_entries(section: &[u8], g: &Geometry, n: usize, checksum: u64) -> Result<Vec<Entry>> {
    let eb = entry_bytes(g.block_size);
    ensure!(section.len() == n * eb, "entry section of the wrong length");
    ensure!(xxh3_64(section) == checksum, "entry checksum mismatch");
    let mut out = Vec::with_capacity(n);
    for e in section.chunks_exact(eb) {
        let hash = u128_at(e, 0);
        let Some(class) = KernelClass::from_code(e[36]) else {
            bail!("unknown kernel class {}", e[36]);
        };
        let key = BlockKey {
            parent: u128_at(e, 16),
            group: u32_at(e, 32),
            class,
            tokens: e[ENTRY_FIXED_BYTES..]
                .chunks_exact(4)
                .map(|t| u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
                .collect(),
        };
        ensure!(
            chain_hash(key.parent, key.class, &key.tokens) == hash,
            "an entry's hash does not match its tokens"
        );
        out.push(Entry {
            key,
            checksum: u64_at(e, 40),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::ROOT_HASH;

    fn geometry() -> Geometry {
        Geometry {
            fingerprint: 0x1234,
            block_bytes: 10,
            block_size: 2,
        }
    }

    fn entries() -> Vec<Entry> {
        let a = BlockKey {
            parent: ROOT_HASH,
            group: 0,
            class: KernelClass::Prompt,
            tokens: vec![1, 2],
        };
        let b = BlockKey {
            parent: a.hash(),
            group: 3,
            class: KernelClass::QuantizedPrompt,
            tokens: vec![3, 4],
        };
        vec![
            Entry {
                key: a,
                checksum: 7,
            },
            Entry {
                key: b,
                checksum: 9,
            },
        ]
    }

    #[test]
    fn a_head_reads_back_and_every_damage_is_refused() -> Result<()> {
        let g = geometry();
        let head = encode_head(&g, &entries());
        let len = file_len(&g, 2);
        assert_eq!(head.len() as u64, len - 20);
        let (n, sum) = parse_header(&head, &g, len)?;
        assert_eq!(n, 2);
        assert_eq!(parse_entries(&head[HEADER_BYTES..], &g, n, sum)?, entries());
        // Truncated or padded file, other settings, any flipped header or entry byte.
        assert!(parse_header(&head, &g, len - 1).is_err());
        assert!(parse_header(&head, &g, len + 1).is_err());
        let other = Geometry {
            fingerprint: 0x1235,
            ..g
        };
        let e = parse_header(&head, &other, len).unwrap_err().to_string();
        assert!(e.contains("other settings"), "{e}");
        for i in 0..head.len() {
            let mut bad = head.clone();
            bad[i] ^= 0x10;
            let ok = parse_header(&bad, &g, len)
                .and_then(|(n, sum)| parse_entries(&bad[HEADER_BYTES..], &g, n, sum).map(|_| ()));
            assert!(ok.is_err(), "a flipped byte {i} was accepted");
        }
        Ok(())
    }

    #[test]
    fn a_header_cannot_ask_for_unbounded_entries() {
        let g = geometry();
        let mut head = encode_head(&g, &entries());
        head[36..40].copy_from_slice(&u32::MAX.to_le_bytes());
        let sum = xxh3_64(&head[..48]);
        head[48..56].copy_from_slice(&sum.to_le_bytes());
        let e = parse_header(&head, &g, u64::MAX).unwrap_err().to_string();
        assert!(e.contains("blocks (1 to 4096"), "{e}");
    }
}
