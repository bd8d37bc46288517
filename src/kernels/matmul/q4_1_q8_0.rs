//! Weight blocks of eight rows interleaved, and their scalar dot products.
//!
//! ggml stores a quantized matrix row after row, each row a run of 32-value blocks
//! (ggml-common.h: `block_q4_1` = f16 d, f16 m, 16 bytes of nibbles = 20 bytes;
//! `block_q8_0` = f16 d, 32 i8 = 34 bytes). We repack at load so that the blocks of the
//! same column of eight consecutive rows sit together, scales first: a decode step then
//! streams each matrix front to back once, and one activation block serves eight rows.
//! Same bytes per weight as ggml (Q4_1 160 bytes per eight blocks, Q8_0 272).
//!
//! Inside a block column the values are in **chunks** of four consecutive elements of each
//! of the eight rows: chunk c (0..8) holds, at slot `s` (0..32), element `4c + s % 4` of
//! row `s / 4`. One 32-byte chunk times the input's four values `x[4c .. 4c + 4]` broadcast
//! to every row (`vpmaddubsw`) adds each row's partial sum into that row's own lanes, so the
//! eight rows' sums never need a horizontal fold, and the unpacked chunk serves several
//! inputs (batched decode) for one load.
//!
//! Layout of a matrix: group g holds rows `8g .. 8g + 8` (missing rows at the end are zero
//! blocks), and its block columns `0 .. cols/32` follow each other; block column b of group
//! g is element `g · (cols/32) + b`. Where the 512-bit kernels read two groups at a time,
//! the loader alternates each pair's blocks ([`interleave`] with `pairs`): block column b of
//! group g is element `(g − g mod 2) · (cols/32) + 2b + g mod 2`, a lone last group as
//! before; [`PairBlocks`] reads a pair in either layout.
use crate::kernels::matmul::q8_1::Q8_1Vector;
use half::f16;

/// Rows per group.
pub const ROWS: usize = 8;

/// One block column (32 values) of eight Q4_1 rows: `w[r][j] = d[r]·q[r][j] + m[r]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Q4_1x8 {
    /// Per row: scale, f16 bits.
    pub d: [u16; ROWS],
    /// Per row: offset, f16 bits.
    pub m: [u16; ROWS],
    /// Chunk pairs: byte i of `qs[p]` holds slot i of chunk 2p (low nibble) and of chunk
    /// 2p + 1 (high nibble).
    pub qs: [[u8; 32]; 4],
}

/// One block column (32 values) of eight Q8_0 rows: `w[r][j] = d[r]·q[r][j]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Q8_0x8 {
    /// Per row: scale, f16 bits.
    pub d: [u16; ROWS],
    /// Chunks: byte s of `qs[c]` is slot s of chunk c.
    pub qs: [[i8; 32]; 8],
}

/// The (chunk, slot) of element `e` (0..32) of row `r` (0..8) in a block column.
#[inline]
pub fn chunk_slot(r: usize, e: usize) -> (usize, usize) {
    (e / 4, 4 * r + e % 4)
}

/// Repack ggml row-major blocks (`block_bytes` each, `bpr` per row, `rows` rows) into
/// groups of eight rows; `fill` copies one ggml block into row `r` of a group block. With
/// `pairs`, each pair of groups `2p`, `2p + 1` alternates block by block: column `b` of
/// group `2p` at `2p · bpr + 2b`, of group `2p + 1` right after it, a lone last group (an
/// odd number of groups) as it was. A pair's blocks then lie in the order the 512-bit
/// kernels read them (both groups' column `b`, then column `b + 1`), one sequential stream
/// per pair instead of two `bpr` blocks apart: the hardware prefetcher follows one long
/// stream from pair to pair and task to task. A one-sequence decode step got faster, an
/// 8-sequence step shows no clear difference (measured: docs/benchmarks.md, "Interleaving
/// pairs of groups").
///
/// The caller has checked that `bytes` holds exactly `rows · bpr` blocks. Each block column
/// is made once, in its final place, a pair (or group) at a time on every thread (this runs
/// once per matrix at load: a second pass or a second copy for the pairs cost a fresh page
/// per 4 KiB again).
pub fn interleave<T: Default + Send>(
    bytes: &[u8],
    block_bytes: usize,
    rows: usize,
    bpr: usize,
    pairs: bool,
    fill: impl Fn(&mut T, usize, &[u8]) + Sync + Send,
) -> Vec<T> {
    let per_run = if pairs { 2 } else { 1 };
    let row_bytes = bpr * block_bytes;
    super::pages::in_runs(
        rows.div_ceil(ROWS) * bpr,
        per_run * bpr,
        |i, run: &mut [T]| {
            // A run of two groups alternates their block columns; a lone group's follow on.
            let n = run.len() / bpr;
            for k in 0..n {
                let first = ROWS * (per_run * i + k);
                for (r, row) in (first..rows.min(first + ROWS)).enumerate() {
                    let src = &bytes[row * row_bytes..][..row_bytes];
                    for (b, block) in src.chunks_exact(block_bytes).enumerate() {
                        fill(&mut run[if n == 2 { 2 * b + k } else { b }], r, block);
                    }
                }
            }
        },
    )
}

/// The block columns of two eight-row groups as the 512-bit kernels read them: column `b`
/// of the first group is `blocks[b · stride]`, of the second `blocks[b · stride + hi]`.
/// Groups one after the other: stride 1, `hi` = blocks per group; pairs interleaved by
/// [`interleave`] with `pairs`: stride 2, `hi` = 1; one group as both halves: stride 1, `hi` = 0.
#[derive(Debug, Clone, Copy)]
pub struct PairBlocks<'a, T> {
    blocks: &'a [T],
    stride: usize,
    hi: usize,
    len: usize,
}

impl<'a, T> PairBlocks<'a, T> {
    /// `len` block columns of `blocks` (`len · stride` blocks or fewer, ending at the pair's
    /// end). Panics when the last column's second block lies past `blocks`.
    pub fn new(blocks: &'a [T], stride: usize, hi: usize, len: usize) -> Self {
        assert!(len == 0 || (len - 1) * stride + hi < blocks.len());
        PairBlocks {
            blocks,
            stride,
            hi,
            len,
        }
    }

    /// Groups `g` and `g + 1` of `blocks`, a matrix's groups of `bpr` block columns each,
    /// pairs interleaved ([`interleave`] with `pairs`; `g` even) or not. Panics when group `g + 1`
    /// is not in `blocks`, or `g` is odd with pairs interleaved.
    pub fn of_groups(blocks: &'a [T], g: usize, bpr: usize, interleaved: bool) -> Self {
        let both = &blocks[g * bpr..(g + 2) * bpr];
        if interleaved {
            assert!(g.is_multiple_of(2), "group {g} starts no interleaved pair");
            Self::new(both, 2, 1, bpr)
        } else {
            Self::new(both, 1, bpr, bpr)
        }
    }

    /// Block columns (blocks of 32 inputs).
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no block column.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Column `b` of the two groups. Panics when `b >= len`.
    #[inline(always)]
    pub fn get(&self, b: usize) -> (&'a T, &'a T) {
        assert!(b < self.len);
        let at = b * self.stride;
        // SAFETY: b < len, so at + hi ≤ (len − 1) · stride + hi < blocks.len() (checked in
        // `new`).
        unsafe {
            (
                self.blocks.get_unchecked(at),
                self.blocks.get_unchecked(at + self.hi),
            )
        }
    }

    /// Where the pair's blocks end: the next pair of a matrix starts here, which the
    /// two-stream layout prefetches (`kernels::prefetch_next`).
    #[inline(always)]
    pub fn end(&self) -> *const u8 {
        self.blocks.as_ptr_range().end as *const u8
    }

    /// Whether the kernels should prefetch the next pair for one input: only for two
    /// streams (stride 1), which the hardware prefetcher loses at every pair; one
    /// interleaved stream it follows. The 512-bit kernels prefetch for two inputs or more
    /// whatever the layout (measured: docs/benchmarks.md, "Which layouts prefetch the next
    /// pair").
    #[inline(always)]
    pub fn prefetch(&self) -> bool {
        self.stride == 1
    }
}

/// Copy ggml `block_q4_1` bytes into row `r` of `g` (ggml: element j in the low nibble of
/// byte j, element j + 16 in its high nibble). Chunk pair p holds elements `8p .. 8p + 4`
/// (low nibbles) and `8p + 4 .. 8p + 8` (high nibbles), so pair p reads bytes
/// `(8p) mod 16 ..` of the block, their low nibbles for p < 2 and high ones after.
pub fn fill_q4_1(g: &mut Q4_1x8, r: usize, b: &[u8]) {
    let d = u16::from_le_bytes([b[0], b[1]]);
    let m = u16::from_le_bytes([b[2], b[3]]);
    fill_q4_1_parts(g, r, d, m, &b[4..20]);
}

/// Row `r` of `g` from a scale's and an offset's f16 bits and the 16 bytes of nibbles laid
/// out as ggml's Q4_1 (and Q4_0) blocks lay them out.
pub fn fill_q4_1_parts(g: &mut Q4_1x8, r: usize, d: u16, m: u16, nibbles: &[u8]) {
    g.d[r] = d;
    g.m[r] = m;
    fill_nibbles(&mut g.qs, r, nibbles);
}

/// Row `r` of a block column's chunk pairs (as [`Q4_1x8::qs`]) from 16 bytes of nibbles laid
/// out as ggml's Q4_1 blocks lay them out (element j low in byte j, j + 16 high).
pub fn fill_nibbles(pairs: &mut [[u8; 32]; 4], r: usize, nibbles: &[u8]) {
    for (p, qs) in pairs.iter_mut().enumerate() {
        let (base, shift) = ((8 * p) % 16, 4 * (p / 2));
        let lo = &nibbles[base..base + 4];
        let hi = &nibbles[base + 4..base + 8];
        for (k, slot) in qs[4 * r..4 * r + 4].iter_mut().enumerate() {
            *slot = ((lo[k] >> shift) & 0x0F) | (((hi[k] >> shift) & 0x0F) << 4);
        }
    }
}

/// Copy ggml `block_q8_0` bytes into row `r` of `g` (chunk c: elements `4c .. 4c + 4`).
pub fn fill_q8_0(g: &mut Q8_0x8, r: usize, b: &[u8]) {
    g.d[r] = u16::from_le_bytes([b[0], b[1]]);
    for (c, chunk) in g.qs.iter_mut().enumerate() {
        for (slot, &v) in chunk[4 * r..4 * r + 4]
            .iter_mut()
            .zip(&b[2 + 4 * c..6 + 4 * c])
        {
            *slot = v as i8;
        }
    }
}

fn f32_of(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Element `e` of row `r` of a Q4_1 block column, the 4-bit code.
#[inline]
pub fn q4_1_code(blk: &Q4_1x8, r: usize, e: usize) -> u8 {
    nibble_code(&blk.qs, r, e)
}

/// Element `e` of row `r` of a block column's chunk pairs (as [`Q4_1x8::qs`]).
#[inline]
pub fn nibble_code(pairs: &[[u8; 32]; 4], r: usize, e: usize) -> u8 {
    let (c, slot) = chunk_slot(r, e);
    (pairs[c / 2][slot] >> (4 * (c % 2))) & 0x0F
}

/// Element `e` of row `r` of a Q8_0 block column.
#[inline]
pub fn q8_0_code(blk: &Q8_0x8, r: usize, e: usize) -> i8 {
    let (c, slot) = chunk_slot(r, e);
    blk.qs[c][slot]
}

/// Portable version of the AVX2 Q4_1 kernel: the same exact integer sums and the same
/// float steps, so the same bits. `x` must hold at least `blocks.len()` blocks.
pub fn q4_1x8_dot(blocks: &[Q4_1x8], x: &Q8_1Vector) -> [f32; ROWS] {
    let mut out = [0f32; ROWS];
    let mut offsets = [0f32; ROWS];
    for (b, blk) in blocks.iter().enumerate() {
        let isum = nibble_isums(&blk.qs, &x.qs[b]);
        // Fused multiply-adds in the SIMD kernels' order, so the portable path gives their
        // bits: 8-bit activations re-round any last-bit difference, and a model's logits
        // then part by the whole quantization noise (issue 56).
        for r in 0..ROWS {
            out[r] = (isum[r] as f32).mul_add(f32_of(blk.d[r]) * x.d[b], out[r]);
            offsets[r] = f32_of(blk.m[r]).mul_add(x.s[b], offsets[r]);
        }
    }
    for (o, m) in out.iter_mut().zip(offsets) {
        *o += m;
    }
    out
}

/// Per row of a block column's chunk pairs (as [`Q4_1x8::qs`]), `Σ_e q[r][e] · xq[e]`
/// (exact integers), walking the bytes in storage order: byte `s` of pair p holds elements
/// `8p + s % 4` (low nibble) and `8p + 4 + s % 4` (high nibble) of row `s / 4`.
pub fn nibble_isums(pairs: &[[u8; 32]; 4], xq: &[i8; 32]) -> [i32; ROWS] {
    let mut isum = [0i32; ROWS];
    for (p, pair) in pairs.iter().enumerate() {
        for (s, &byte) in pair.iter().enumerate() {
            let e = 8 * p + s % 4;
            let lo = (byte & 0x0F) as i32 * xq[e] as i32;
            let hi = (byte >> 4) as i32 * xq[e + 4] as i32;
            isum[s / 4] += lo + hi;
        }
    }
    isum
}

/// Portable version of the AVX2 Q8_0 kernel, its bits as [`q4_1x8_dot`]'s. `x` must hold at least `blocks.len()` blocks.
pub fn q8_0x8_dot(blocks: &[Q8_0x8], x: &Q8_1Vector) -> [f32; ROWS] {
    let mut out = [0f32; ROWS];
    for (b, blk) in blocks.iter().enumerate() {
        let isum = q8_0_isums(blk, &x.qs[b]);
        for (r, o) in out.iter_mut().enumerate() {
            *o = (isum[r] as f32).mul_add(f32_of(blk.d[r]) * x.d[b], *o);
        }
    }
    out
}

/// Per row of a Q8_0 block column, `Σ_e q[r][e] · xq[e]` (exact integers), in storage
/// order: slot `s` of chunk c is element `4c + s % 4` of row `s / 4`.
fn q8_0_isums(blk: &Q8_0x8, xq: &[i8; 32]) -> [i32; ROWS] {
    let mut isum = [0i32; ROWS];
    for (c, chunk) in blk.qs.iter().enumerate() {
        for (s, &q) in chunk.iter().enumerate() {
            isum[s / 4] += q as i32 * xq[4 * c + s % 4] as i32;
        }
    }
    isum
}

/// Row `r` of block column `blk` as 32 f32 values (Q4_1).
pub fn dequantize_q4_1(blk: &Q4_1x8, r: usize, out: &mut [f32]) {
    let (d, m) = (f32_of(blk.d[r]), f32_of(blk.m[r]));
    for (e, o) in out.iter_mut().enumerate().take(32) {
        *o = q4_1_code(blk, r, e) as f32 * d + m;
    }
}

/// Row `r` of block column `blk` as 32 f32 values (Q8_0).
pub fn dequantize_q8_0(blk: &Q8_0x8, r: usize, out: &mut [f32]) {
    let d = f32_of(blk.d[r]);
    for (e, o) in out.iter_mut().enumerate().take(32) {
        *o = q8_0_code(blk, r, e) as f32 * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pseudo-random bytes (xorshift), reproducible.
    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed.max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 32) as u8
            })
            .collect()
    }

    /// Every element of every row lands where [`chunk_slot`] says, for 8 rows and a partial
    /// last group, both formats.
    #[test]
    fn interleave_puts_each_element_at_its_chunk_slot() {
        let (rows, bpr) = (11, 3);
        let q4 = bytes(rows * bpr * 20, 7);
        let g4: Vec<Q4_1x8> = interleave(&q4, 20, rows, bpr, false, fill_q4_1);
        let q8 = bytes(rows * bpr * 34, 8);
        let g8: Vec<Q8_0x8> = interleave(&q8, 34, rows, bpr, false, fill_q8_0);
        assert_eq!((g4.len(), g8.len()), (2 * bpr, 2 * bpr));
        for row in 0..rows {
            for col in 0..bpr {
                let (at, r) = ((row / ROWS) * bpr + col, row % ROWS);
                let b4 = &q4[(row * bpr + col) * 20..][..20];
                assert_eq!(
                    (g4[at].d[r], g4[at].m[r]),
                    (
                        u16::from_le_bytes([b4[0], b4[1]]),
                        u16::from_le_bytes([b4[2], b4[3]])
                    )
                );
                let b8 = &q8[(row * bpr + col) * 34..][..34];
                assert_eq!(g8[at].d[r], u16::from_le_bytes([b8[0], b8[1]]));
                for e in 0..32 {
                    let want = if e < 16 {
                        b4[4 + e] & 0x0F
                    } else {
                        b4[4 + e - 16] >> 4
                    };
                    assert_eq!(
                        q4_1_code(&g4[at], r, e),
                        want,
                        "q4_1 row {row} col {col} e {e}"
                    );
                    assert_eq!(
                        q8_0_code(&g8[at], r, e),
                        b8[2 + e] as i8,
                        "q8_0 row {row} e {e}"
                    );
                }
            }
        }
        // The rows past the end of the matrix stay zero.
        assert!(g4[bpr..]
            .iter()
            .all(|g| g.qs.iter().all(|c| c[12..].iter().all(|&v| v == 0))));
    }
}
