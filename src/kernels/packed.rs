//! Weight blocks of eight rows interleaved, and their scalar dot products.
//!
//! ggml stores a quantized matrix row after row, each row a run of 32-value blocks
//! (ggml-common.h: `block_q4_1` = f16 d, f16 m, 16 bytes of nibbles = 20 bytes;
//! `block_q8_0` = f16 d, 32 i8 = 34 bytes). We repack at load so that the blocks of the
//! same column of eight consecutive rows sit together, scales first: a decode step then
//! streams each matrix front to back once, and one activation block serves eight rows.
//! Same bytes per weight as ggml (Q4_1 160 bytes per eight blocks, Q8_0 272).
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
    /// Per row: byte j holds element j (low nibble) and element j + 16 (high nibble).
    pub qs: [[u8; 16]; ROWS],
}

/// One block column (32 values) of eight Q8_0 rows: `w[r][j] = d[r]·q[r][j]`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Q8_0x8 {
    /// Per row: scale, f16 bits.
    pub d: [u16; ROWS],
    /// Per row: 32 signed values.
    pub qs: [[i8; 32]; ROWS],
}

impl Default for Q8_0x8 {
    fn default() -> Self {
        Q8_0x8 {
            d: [0; ROWS],
            qs: [[0; 32]; ROWS],
        }
    }
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

/// Copy ggml `block_q4_1` bytes into row `r` of `g`.
pub fn fill_q4_1(g: &mut Q4_1x8, r: usize, b: &[u8]) {
    g.d[r] = u16::from_le_bytes([b[0], b[1]]);
    g.m[r] = u16::from_le_bytes([b[2], b[3]]);
    g.qs[r].copy_from_slice(&b[4..20]);
}

/// Copy ggml `block_q8_0` bytes into row `r` of `g`.
pub fn fill_q8_0(g: &mut Q8_0x8, r: usize, b: &[u8]) {
    g.d[r] = u16::from_le_bytes([b[0], b[1]]);
    for (o, &v) in g.qs[r].iter_mut().zip(&b[2..34]) {
        *o = v as i8;
    }
}

fn f32_of(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Portable version of the AVX2 Q4_1 kernel (same formula; summation order may differ in
/// the last bits). `x` must hold at least `blocks.len()` blocks.
pub fn q4_1x8_dot(blocks: &[Q4_1x8], x: &Q8_1Vector) -> [f32; ROWS] {
    let mut out = [0f32; ROWS];
    let mut offsets = [0f32; ROWS];
    for (b, blk) in blocks.iter().enumerate() {
        let xq = &x.qs[b];
        for r in 0..ROWS {
            let q = &blk.qs[r];
            let isum: i32 = (0..16)
                .map(|j| {
                    (q[j] & 0x0F) as i32 * xq[j] as i32 + (q[j] >> 4) as i32 * xq[j + 16] as i32
                })
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
        for ((o, q), &d) in out.iter_mut().zip(&blk.qs).zip(&blk.d) {
            let isum: i32 = q
                .iter()
                .zip(&x.qs[b])
                .map(|(&w, &v)| w as i32 * v as i32)
                .sum();
            *o += isum as f32 * (f32_of(d) * x.d[b]);
        }
    }
    out
}

/// Row `r` of block column `blk` as 32 f32 values (Q4_1).
pub fn dequantize_q4_1(blk: &Q4_1x8, r: usize, out: &mut [f32]) {
    let (d, m) = (f32_of(blk.d[r]), f32_of(blk.m[r]));
    for j in 0..16 {
        out[j] = (blk.qs[r][j] & 0x0F) as f32 * d + m;
        out[j + 16] = (blk.qs[r][j] >> 4) as f32 * d + m;
    }
}

/// Row `r` of block column `blk` as 32 f32 values (Q8_0).
pub fn dequantize_q8_0(blk: &Q8_0x8, r: usize, out: &mut [f32]) {
    let d = f32_of(blk.d[r]);
    for (o, &q) in out.iter_mut().zip(&blk.qs[r]) {
        *o = q as f32 * d;
    }
}
