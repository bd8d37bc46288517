//! Eight-row block columns of 8-bit codes with a scale and an offset per half block
//! (`Q8Hx8`): the layout our kernels run ggml's K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and
//! Q5_1 on, each weight exactly ggml's value (`quant_kquants.rs` repacks them at load).
//!
//! The K-quants hold 256 weights per super-block with a scale (and for Q2_K/Q4_K/Q5_K a
//! minimum) per sub-block of 16 or 32 weights, built in f32 from an f16 super-block scale
//! and a 4- to 8-bit integer (ggml-quants.c's `dequantize_row_q*_K`: `d · sc`, `dmin · m`).
//! Here every 32-weight block column of eight rows keeps, per row and per half (elements
//! 0..16 and 16..32), that f32 scale `d` and an f32 offset `m`, and each weight's code as an
//! unsigned byte (0..=63): `w = d · q + m`. Offsets hold the minimum (`−dmin · m`) or the
//! code's bias (`−32 · d` for Q6_K, `−4 · d` for Q3_K), so every weight is a product and
//! a sum that are both exact in f32 (see `quant_kquants.rs`), ggml's value.
//!
//! Codes sit in chunks as in [`crate::kernels::matmul::q4_1_q8_0`] (chunk c: elements `4c .. 4c + 4` of the
//! eight rows), so chunks 0..4 are the first half and 4..8 the second. A dot product with
//! Q8_1 activations is per half `d · d_x · Σ q · q_x + m · d_x · Σ q_x` (the activation's
//! half sums, [`crate::kernels::matmul::q8_1::Q8_1Vector`]'s `s_half`).
//!
//! 384 bytes per 256 weights (12 bits each): more than the files' 2.6–6.6 bits — the price of
//! one kernel for six types; the bytes each type's own layout would save are the next step.
use crate::kernels::matmul::q4_1_q8_0::{chunk_slot, ROWS};
use crate::kernels::matmul::q8_1::Q8_1Vector;

/// One block column (32 values) of eight rows: `w[r][j] = d[h][r] · q[r][j] + m[h][r]` with
/// `h = j / 16`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Q8Hx8 {
    /// Per half, per row: scale.
    pub d: [[f32; ROWS]; 2],
    /// Per half, per row: offset.
    pub m: [[f32; ROWS]; 2],
    /// Chunks of unsigned codes (0..=63): byte s of `qs[c]` is slot s of chunk c.
    pub qs: [[u8; 32]; 8],
}

/// Bytes of one [`Q8Hx8`] per row: 48 per 32 weights.
pub const Q8H_BYTES_PER_BLOCK: usize = std::mem::size_of::<Q8Hx8>() / ROWS;

/// One 32-weight block of one row as [`Q8Hx8`] holds it: codes in element order, and the
/// scale and offset of each half.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HalfScaled {
    /// Codes, 0..=63.
    pub q: [u8; 32],
    /// Scale of elements 0..16 and 16..32.
    pub d: [f32; 2],
    /// Offset of elements 0..16 and 16..32.
    pub m: [f32; 2],
}

/// Row `r` of `g` from one block.
pub fn fill_q8h(g: &mut Q8Hx8, r: usize, b: &HalfScaled) {
    for h in 0..2 {
        g.d[h][r] = b.d[h];
        g.m[h][r] = b.m[h];
    }
    for (e, &q) in b.q.iter().enumerate() {
        let (c, s) = chunk_slot(r, e);
        g.qs[c][s] = q;
    }
}

/// Element `e` of row `r`'s codes.
#[inline]
pub fn q8h_code(blk: &Q8Hx8, r: usize, e: usize) -> u8 {
    let (c, s) = chunk_slot(r, e);
    blk.qs[c][s]
}

/// Row `r` of block column `blk` as 32 f32 values: `q · d + m` (a multiply then an add).
pub fn dequantize_q8h(blk: &Q8Hx8, r: usize, out: &mut [f32]) {
    for (e, o) in out.iter_mut().enumerate().take(32) {
        let h = e / 16;
        *o = q8h_code(blk, r, e) as f32 * blk.d[h][r] + blk.m[h][r];
    }
}

/// Per row and half of a block column, `Σ q · x_q` (exact integers).
pub(crate) fn q8h_isums(blk: &Q8Hx8, xq: &[i8; 32]) -> [[i32; ROWS]; 2] {
    let mut isum = [[0i32; ROWS]; 2];
    for (c, chunk) in blk.qs.iter().enumerate() {
        for (s, &q) in chunk.iter().enumerate() {
            isum[c / 4][s / 4] += q as i32 * xq[4 * c + s % 4] as i32;
        }
    }
    isum
}

/// Portable version of the AVX2 kernel: the same steps in the same order, its fused
/// multiply-adds as `f32::mul_add`, so its bits. `x` must hold at least `blocks.len()` blocks.
pub fn q8hx8_dot(blocks: &[Q8Hx8], x: &Q8_1Vector) -> [f32; ROWS] {
    let mut out = [0f32; ROWS];
    for (b, blk) in blocks.iter().enumerate() {
        let isum = q8h_isums(blk, &x.qs[b]);
        for (r, o) in out.iter_mut().enumerate() {
            for (sum, d) in isum.iter().zip(&blk.d) {
                *o = (sum[r] as f32).mul_add(d[r] * x.d[b], *o);
            }
            for (m, s) in blk.m.iter().zip(&x.s_half[b]) {
                *o = m[r].mul_add(*s, *o);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each element goes to its chunk slot and comes back; the struct is 384 bytes.
    #[test]
    fn codes_and_scales_round_trip() {
        assert_eq!(Q8H_BYTES_PER_BLOCK, 48);
        let mut g = Q8Hx8::default();
        for r in 0..ROWS {
            let b = HalfScaled {
                q: std::array::from_fn(|e| ((e * 7 + r * 3) % 64) as u8),
                d: [r as f32 + 0.5, -(r as f32) - 0.25],
                m: [0.125 * r as f32, -1.0],
            };
            fill_q8h(&mut g, r, &b);
        }
        for r in 0..ROWS {
            let mut out = [0f32; 32];
            dequantize_q8h(&g, r, &mut out);
            for (e, &v) in out.iter().enumerate() {
                let q = ((e * 7 + r * 3) % 64) as f32;
                let want = if e < 16 {
                    q * (r as f32 + 0.5) + 0.125 * r as f32
                } else {
                    q * (-(r as f32) - 0.25) - 1.0
                };
                assert_eq!(v, want, "row {r} element {e}");
            }
        }
    }
}
