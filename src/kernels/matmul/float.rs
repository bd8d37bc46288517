//! Eight-row block columns of unquantized weights: GGUF matrices stored as F16, BF16 or F32
//! (ggml types 1, 30 and 0), held in their own precision — two bytes per weight for F16
//! and BF16, four for F32, as in the file — and multiplied against f32 activations.
//!
//! A block column is 32 columns of eight rows, column by column: `w[k][r]` is row `r`'s
//! weight in column `k`, so one load gives the eight rows' weights of a column and the
//! kernels need no horizontal sums (`out[r] += w[k][r] · x[k]`). F16 and BF16 keep ggml's
//! bits (IEEE binary16; bfloat16 = the top half of an f32), widened to f32 exactly in
//! registers; products and sums are f32 fused multiply-adds.
//!
//! Summation order (the portable code and `float_avx2.rs` are the same steps, bit for
//! bit): per input, two accumulators of eight rows, column `k` of each block column into
//! accumulator `k % 2`, then `acc[0] + acc[1]`. Each input's arithmetic is independent of
//! how many inputs share a call.
use crate::kernels::matmul::q4_1_q8_0::ROWS;

/// Values per block column (a block of 32 columns, as the quantized layouts').
pub const COLS: usize = 32;

/// One block column of eight rows of 16-bit floats (F16 or BF16 bits, by the matrix's type).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct H16x8 {
    /// `w[k][r]`: row `r`, column `k`.
    pub w: [[u16; ROWS]; COLS],
}

impl Default for H16x8 {
    fn default() -> Self {
        H16x8 {
            w: [[0; ROWS]; COLS],
        }
    }
}

/// One block column of eight rows of f32.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct F32x8 {
    /// `w[k][r]`: row `r`, column `k`.
    pub w: [[f32; ROWS]; COLS],
}

impl Default for F32x8 {
    fn default() -> Self {
        F32x8 {
            w: [[0.0; ROWS]; COLS],
        }
    }
}

/// Bytes of 32 weights of one row in a GGUF F16 or BF16 tensor.
pub const H16_BLOCK_BYTES: usize = 2 * COLS;
/// Bytes of 32 weights of one row in a GGUF F32 tensor.
pub const F32_BLOCK_BYTES: usize = 4 * COLS;

/// Row `r` of `g` from 32 little-endian 16-bit values (`src`, 64 bytes).
pub fn fill_h16(g: &mut H16x8, r: usize, src: &[u8]) {
    for (k, v) in src.chunks_exact(2).enumerate().take(COLS) {
        g.w[k][r] = u16::from_le_bytes([v[0], v[1]]);
    }
}

/// Row `r` of `g` from 32 little-endian f32 (`src`, 128 bytes).
pub fn fill_f32(g: &mut F32x8, r: usize, src: &[u8]) {
    for (k, v) in src.chunks_exact(4).enumerate().take(COLS) {
        g.w[k][r] = f32::from_le_bytes([v[0], v[1], v[2], v[3]]);
    }
}

/// IEEE binary16 bits as f32 (exact).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

/// bfloat16 bits as f32 (exact: the f32 whose top half they are).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Whether every 16-bit value of `bytes` is a finite F16 (`bf16` false) or BF16 number:
/// the index of the first that is not (an infinity or NaN: a damaged file), else None.
pub fn first_non_finite_h16(bytes: &[u8], bf16: bool) -> Option<usize> {
    let exp = if bf16 { 0x7f80u16 } else { 0x7c00 };
    bytes
        .chunks_exact(2)
        .position(|v| u16::from_le_bytes([v[0], v[1]]) & exp == exp)
}

/// Row `r` of a block column as 32 f32, widened by `widen`.
pub fn dequantize_h16(blk: &H16x8, r: usize, widen: fn(u16) -> f32, out: &mut [f32]) {
    for (o, col) in out.iter_mut().zip(&blk.w) {
        *o = widen(col[r]);
    }
}

/// Row `r` of an f32 block column.
pub fn dequantize_f32(blk: &F32x8, r: usize, out: &mut [f32]) {
    for (o, col) in out.iter_mut().zip(&blk.w) {
        *o = col[r];
    }
}

/// Portable `W · x` over eight rows' block columns (`blocks`, column `k` widened by
/// `widen`) and one input `x` (at least `32 · blocks.len()` values): the steps of the AVX2
/// kernels, one lane at a time, with fused multiply-adds.
pub fn h16x8_dot(blocks: &[H16x8], widen: fn(u16) -> f32, x: &[f32]) -> [f32; ROWS] {
    let mut acc = [[0f32; ROWS]; 2];
    for (blk, xb) in blocks.iter().zip(x.chunks_exact(COLS)) {
        for (k, (col, &xv)) in blk.w.iter().zip(xb).enumerate() {
            for (a, &w) in acc[k % 2].iter_mut().zip(col) {
                *a = widen(w).mul_add(xv, *a);
            }
        }
    }
    std::array::from_fn(|r| acc[0][r] + acc[1][r])
}

/// [`h16x8_dot`] for f32 block columns.
pub fn f32x8_dot(blocks: &[F32x8], x: &[f32]) -> [f32; ROWS] {
    let mut acc = [[0f32; ROWS]; 2];
    for (blk, xb) in blocks.iter().zip(x.chunks_exact(COLS)) {
        for (k, (col, &xv)) in blk.w.iter().zip(xb).enumerate() {
            for (a, &w) in acc[k % 2].iter_mut().zip(col) {
                *a = w.mul_add(xv, *a);
            }
        }
    }
    std::array::from_fn(|r| acc[0][r] + acc[1][r])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_is_exact_and_damage_is_found() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(bf16_to_f32(0x4049), f32::from_bits(0x4049_0000));
        let ok: Vec<u8> = [0x3c00u16, 0x7bff]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(first_non_finite_h16(&ok, false), None);
        let inf: Vec<u8> = [0x3c00u16, 0x7c00]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(first_non_finite_h16(&inf, false), Some(1));
        // 0x7c00 is a finite BF16 (about 2.6e36); 0x7f80 is its infinity.
        assert_eq!(first_non_finite_h16(&inf, true), None);
        let nan: Vec<u8> = [0xffc0u16].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(first_non_finite_h16(&nan, true), Some(0));
    }

    #[test]
    fn rows_round_trip_through_a_block_column() {
        let mut g = H16x8::default();
        let mut f = F32x8::default();
        for r in 0..ROWS {
            let vals: Vec<f32> = (0..COLS)
                .map(|k| (k as f32 - 7.5) * (r as f32 + 1.0))
                .collect();
            let h: Vec<u8> = vals
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
                .collect();
            let w: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
            fill_h16(&mut g, r, &h);
            fill_f32(&mut f, r, &w);
        }
        for r in 0..ROWS {
            let (mut a, mut b) = ([0f32; COLS], [0f32; COLS]);
            dequantize_h16(&g, r, f16_to_f32, &mut a);
            dequantize_f32(&f, r, &mut b);
            for k in 0..COLS {
                let want = (k as f32 - 7.5) * (r as f32 + 1.0);
                assert_eq!(a[k], want, "f16 row {r} column {k}");
                assert_eq!(b[k], want, "f32 row {r} column {k}");
            }
        }
    }
}
