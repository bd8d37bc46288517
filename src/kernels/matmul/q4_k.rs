//! Q4_K in nearly its own bytes: eight-row block columns of 4-bit codes with each row's
//! 6-bit sub-block scale and minimum, and per super-block (eight block columns) the rows'
//! f16 scales `d` and `dmin` (`quant_kquants.rs` repacks ggml's `block_q4_K` into this).
//!
//! ggml's weight is `d · sc · q − dmin · m` (ggml-quants.c's `dequantize_row_q4_K`: `d1 =
//! d · sc`, `m1 = dmin · m` in f32, then `d1 · q − m1`); the kernels rebuild `d1` and `m1`
//! for the eight rows of a block column in one vector multiply each (exact in f32: 11 + 6
//! significant bits), so they work on ggml's very values. 144 bytes per block column of eight
//! rows plus 32 per super-block: 4.625 bits per weight against the file's 4.5.
//!
//! Codes sit in chunk pairs exactly as [`crate::kernels::matmul::q4_1_q8_0::Q4_1x8`]'s, so the integer part of
//! the dot product is Q4_1's; `Σ w·x ≈ d1 · d_x · Σ q · q_x − m1 · s_x`.
use crate::kernels::matmul::q4_1_q8_0::{self, ROWS};
use crate::kernels::matmul::q8_1::Q8_1Vector;
use half::f16;

/// Weights per K-quant super-block.
pub const QK_K: usize = 256;

/// Block columns per super-block (256 weights).
pub const BLOCKS_PER_SUPER: usize = 8;

/// One block column (32 values) of eight Q4_K rows: `w[r][j] = d·sc[r] · q[r][j] −
/// dmin·mn[r]` with the row's `d`, `dmin` from its [`Q4KSuper`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Q4Kx8 {
    /// Per row: the sub-block's scale (0..=63).
    pub sc: [u8; ROWS],
    /// Per row: the sub-block's minimum (0..=63).
    pub mn: [u8; ROWS],
    /// Chunk pairs of nibbles, as [`crate::kernels::matmul::q4_1_q8_0::Q4_1x8::qs`].
    pub qs: [[u8; 32]; 4],
}

/// The f16 scales of eight rows' super-block (eight block columns).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Q4KSuper {
    /// Per row: super-block scale, f16 bits.
    pub d: [u16; ROWS],
    /// Per row: super-block scale of the minima, f16 bits.
    pub dmin: [u16; ROWS],
}

/// Bytes per row of a 256-weight super-block held this way: 8 · 144 / 8 + 32 / 8 = 148.
pub const Q4K_BYTES_PER_SUPER: usize =
    (BLOCKS_PER_SUPER * std::mem::size_of::<Q4Kx8>() + std::mem::size_of::<Q4KSuper>()) / ROWS;

fn f32_of(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Row `r`'s `(d1, m1)` = `(d · sc, dmin · mn)` for block column `blk` of super-block `s`.
#[inline]
pub fn scale_min(blk: &Q4Kx8, s: &Q4KSuper, r: usize) -> (f32, f32) {
    (
        f32_of(s.d[r]) * blk.sc[r] as f32,
        f32_of(s.dmin[r]) * blk.mn[r] as f32,
    )
}

/// Row `r` of block column `blk` (of super-block `s`) as 32 f32 values: `d1 · q − m1`,
/// ggml's expression.
pub fn dequantize_q4k(blk: &Q4Kx8, s: &Q4KSuper, r: usize, out: &mut [f32]) {
    let (d1, m1) = scale_min(blk, s, r);
    for (e, o) in out.iter_mut().enumerate().take(32) {
        *o = d1 * q4_1_q8_0::nibble_code(&blk.qs, r, e) as f32 - m1;
    }
}

/// Portable version of the AVX2 kernel, its very float steps (each lane's fused
/// multiply-adds as `f32::mul_add`, the minima subtracted at the end), so its bits.
/// `x` must hold at least `blocks.len()` blocks, and `supers` one per eight.
pub fn q4kx8_dot(blocks: &[Q4Kx8], supers: &[Q4KSuper], x: &Q8_1Vector) -> [f32; ROWS] {
    let mut out = [0f32; ROWS];
    let mut minima = [0f32; ROWS];
    for (b, blk) in blocks.iter().enumerate() {
        let isum = q4_1_q8_0::nibble_isums(&blk.qs, &x.qs[b]);
        let s = &supers[b / BLOCKS_PER_SUPER];
        for r in 0..ROWS {
            let (d1, m1) = scale_min(blk, s, r);
            out[r] = (isum[r] as f32).mul_add(d1 * x.d[b], out[r]);
            minima[r] = m1.mul_add(x.s[b], minima[r]);
        }
    }
    for (o, m) in out.iter_mut().zip(minima) {
        *o -= m;
    }
    out
}
