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
//! g is element `g · (cols/32) + b`.
use super::q8_1::Q8_1Vector;
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
/// groups of eight rows; `fill` copies one ggml block into row `r` of a group block.
/// The caller has checked that `bytes` holds exactly `rows · bpr` blocks.
pub fn interleave<T: Default + Clone>(
    bytes: &[u8],
    block_bytes: usize,
    rows: usize,
    bpr: usize,
    fill: impl Fn(&mut T, usize, &[u8]),
) -> Vec<T> {
    let groups = rows.div_ceil(ROWS);
    let mut out = vec![T::default(); groups * bpr];
    for (i, block) in bytes.chunks_exact(block_bytes).enumerate() {
        let (row, col) = (i / bpr, i % bpr);
        fill(&mut out[(row / ROWS) * bpr + col], row % ROWS, block);
    }
    out
}

/// Copy ggml `block_q4_1` bytes into row `r` of `g` (element j in the low nibble of byte
/// j, element j + 16 in its high nibble).
pub fn fill_q4_1(g: &mut Q4_1x8, r: usize, b: &[u8]) {
    g.d[r] = u16::from_le_bytes([b[0], b[1]]);
    g.m[r] = u16::from_le_bytes([b[2], b[3]]);
    for e in 0..32 {
        let v = if e < 16 {
            b[4 + e] & 0x0F
        } else {
            b[4 + e - 16] >> 4
        };
        let (c, slot) = chunk_slot(r, e);
        g.qs[c / 2][slot] |= v << (4 * (c % 2));
    }
}

/// Copy ggml `block_q8_0` bytes into row `r` of `g`.
pub fn fill_q8_0(g: &mut Q8_0x8, r: usize, b: &[u8]) {
    g.d[r] = u16::from_le_bytes([b[0], b[1]]);
    for e in 0..32 {
        let (c, slot) = chunk_slot(r, e);
        g.qs[c][slot] = b[2 + e] as i8;
    }
}

fn f32_of(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Element `e` of row `r` of a Q4_1 block column, the 4-bit code.
#[inline]
pub fn q4_1_code(blk: &Q4_1x8, r: usize, e: usize) -> u8 {
    let (c, slot) = chunk_slot(r, e);
    (blk.qs[c / 2][slot] >> (4 * (c % 2))) & 0x0F
}

/// Element `e` of row `r` of a Q8_0 block column.
#[inline]
pub fn q8_0_code(blk: &Q8_0x8, r: usize, e: usize) -> i8 {
    let (c, slot) = chunk_slot(r, e);
    blk.qs[c][slot]
}

/// Portable version of the AVX2 Q4_1 kernel (same formula; summation order may differ in
/// the last bits). `x` must hold at least `blocks.len()` blocks.
pub fn q4_1x8_dot(blocks: &[Q4_1x8], x: &Q8_1Vector) -> [f32; ROWS] {
    let mut out = [0f32; ROWS];
    let mut offsets = [0f32; ROWS];
    for (b, blk) in blocks.iter().enumerate() {
        let xq = &x.qs[b];
        for r in 0..ROWS {
            let isum: i32 = (0..32)
                .map(|e| q4_1_code(blk, r, e) as i32 * xq[e] as i32)
                .sum();
            out[r] += isum as f32 * (f32_of(blk.d[r]) * x.d[b]);
            offsets[r] += f32_of(blk.m[r]) * x.s[b];
        }
    }
    for (o, m) in out.iter_mut().zip(offsets) {
        *o += m;
    }
    out
}

/// Portable version of the AVX2 Q8_0 kernel. `x` must hold at least `blocks.len()` blocks.
pub fn q8_0x8_dot(blocks: &[Q8_0x8], x: &Q8_1Vector) -> [f32; ROWS] {
    let mut out = [0f32; ROWS];
    for (b, blk) in blocks.iter().enumerate() {
        for (r, o) in out.iter_mut().enumerate() {
            let isum: i32 = (0..32)
                .map(|e| q8_0_code(blk, r, e) as i32 * x.qs[b][e] as i32)
                .sum();
            *o += isum as f32 * (f32_of(blk.d[r]) * x.d[b]);
        }
    }
    out
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
