//! The 5-bit types in nearly their own bytes: eight-row block columns of Q4_1's nibbles
//! ([`crate::kernels::matmul::q4_1_q8_0::Q4_1x8`]'s chunk pairs) plus a plane of fifth bits, for Q5_0, Q5_1
//! ([`Q5_1x8`]: f16 scale and offset per row, 24 bytes per 32 weights as in a Q5_1 file,
//! Q5_0's 22 + its offset) and Q5_K ([`Q5Kx8`]: Q4_K's 6-bit scales and minima with
//! [`crate::kernels::matmul::q4_k::Q4KSuper`], 180 bytes per 256 weights against the file's 176).
//!
//! Weights are ggml's (ggml-quants.c's `dequantize_row_q5_0/q5_1/q5_K`): Q5_1 `d · q + m`;
//! Q5_0 `d · (q − 16)`, held as `d · q + m` with `m = −16 · d` (exact in f16 while
//! `|16 · d|` ≤ 65,504, and `d · q − 16 · d` exact in f32: 16 significant bits); Q5_K `d1 ·
//! q − m1` with `d1 = d · sc`, `m1 = dmin · m` in f32, as Q4_K.
//!
//! The fifth bits ([`Q5Codes::qh`]): byte `s` (the slot of [`crate::kernels::matmul::q4_1_q8_0::chunk_slot`])
//! holds, for chunk pair `p` (chunks 2p, low nibbles, and 2p + 1, high nibbles), chunk 2p's
//! bit at bit `4 + p` and chunk 2p + 1's at bit `p`: one 16-bit shift right by `p` puts
//! them at bits 4 and 0 of every byte, for the kernels (`q5_avx2.rs`).
use crate::kernels::matmul::q4_1_q8_0::{self, chunk_slot, ROWS};
use crate::kernels::matmul::q4_k::{Q4KSuper, BLOCKS_PER_SUPER};
use crate::kernels::matmul::q8_1::Q8_1Vector;
use half::f16;

/// The 5-bit codes of a block column of eight rows.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Q5Codes {
    /// Low four bits, chunk pairs as [`crate::kernels::matmul::q4_1_q8_0::Q4_1x8::qs`].
    pub qs: [[u8; 32]; 4],
    /// Fifth bits, per slot (see the module's docs).
    pub qh: [u8; 32],
}

/// One block column of eight Q5_0/Q5_1 rows: `w[r][j] = d[r] · q[r][j] + m[r]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Q5_1x8 {
    /// Per row: scale, f16 bits.
    pub d: [u16; ROWS],
    /// Per row: offset, f16 bits.
    pub m: [u16; ROWS],
    /// Codes 0..=31.
    pub codes: Q5Codes,
}

/// One block column of eight Q5_K rows: `w[r][j] = d·sc[r] · q[r][j] − dmin·mn[r]` with the
/// row's `d`, `dmin` from its [`Q4KSuper`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Q5Kx8 {
    /// Per row: the sub-block's scale (0..=63).
    pub sc: [u8; ROWS],
    /// Per row: the sub-block's minimum (0..=63).
    pub mn: [u8; ROWS],
    /// Codes 0..=31.
    pub codes: Q5Codes,
}

/// Bytes per row of 32 weights held as [`Q5_1x8`]: 24.
pub const Q5_1_BYTES_PER_BLOCK: usize = std::mem::size_of::<Q5_1x8>() / ROWS;

/// Bytes per row of a 256-weight super-block held as [`Q5Kx8`]: 8 · 176 / 8 + 32 / 8 = 180.
pub const Q5K_BYTES_PER_SUPER: usize =
    (BLOCKS_PER_SUPER * std::mem::size_of::<Q5Kx8>() + std::mem::size_of::<Q4KSuper>()) / ROWS;

/// The bit of [`Q5Codes::qh`]'s bytes that holds chunk `c`'s fifth bit.
#[inline]
fn high_bit(c: usize) -> usize {
    match c % 2 {
        0 => 4 + c / 2,
        _ => c / 2,
    }
}

/// Row `r` of `codes` from 32 codes (0..=31) in element order.
pub fn fill_codes(codes: &mut Q5Codes, r: usize, q: &[u8; 32]) {
    let nibbles: [u8; 16] = std::array::from_fn(|l| (q[l] & 0x0F) | ((q[l + 16] & 0x0F) << 4));
    q4_1_q8_0::fill_nibbles(&mut codes.qs, r, &nibbles);
    // Slot 4r + k holds element 4c + k of every chunk c (q4_1_q8_0::chunk_slot): its byte is
    // whole in this row, so it is written once rather than bit by bit.
    for k in 0..4 {
        codes.qh[4 * r + k] = (0..8)
            .map(|c| ((q[4 * c + k] >> 4) & 1) << high_bit(c))
            .fold(0, |a, b| a | b);
    }
}

/// Element `e` of row `r`'s codes (0..=31).
#[inline]
pub fn code(codes: &Q5Codes, r: usize, e: usize) -> u8 {
    let (c, s) = chunk_slot(r, e);
    q4_1_q8_0::nibble_code(&codes.qs, r, e) | (((codes.qh[s] >> high_bit(c)) & 1) << 4)
}

/// The 32 codes (0..=31) of a ggml `block_q5_0` or `block_q5_1` (`qh` the block's 32 high
/// bits, `qs` its 16 bytes of nibbles): element `j` is the low nibble of `qs[j]` with bit
/// `j` of `qh` on top, element `j + 16` the high nibble with bit `j + 16`.
pub fn q5_codes(qh: u32, qs: &[u8]) -> [u8; 32] {
    std::array::from_fn(|e| {
        let (byte, shift) = (qs[e % 16], 4 * (e / 16));
        ((byte >> shift) & 0x0F) | ((((qh >> e) & 1) as u8) << 4)
    })
}

/// Row `r` of `g` from a ggml `block_q5_1` (24 bytes: f16 `d`, `m`, `qh`, nibbles).
pub fn fill_q5_1(g: &mut Q5_1x8, r: usize, b: &[u8]) {
    g.d[r] = u16::from_le_bytes([b[0], b[1]]);
    g.m[r] = u16::from_le_bytes([b[2], b[3]]);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    fill_codes(&mut g.codes, r, &q5_codes(qh, &b[8..24]));
}

/// Whether a `block_q5_0` scale (f16 bits) has `16 · d` finite in f16, so that the block
/// is held exactly as [`Q5_1x8`] with `m = −16 · d`.
pub fn q5_0_offset_fits(d: u16) -> bool {
    (16.0 * f16::from_bits(d).to_f32()).abs() <= f16::MAX.to_f32()
}

/// Row `r` of `g` from a ggml `block_q5_0` (22 bytes: f16 `d`, `qh`, nibbles), as `d · q +
/// m` with `m = −16 · d` (the caller checked [`q5_0_offset_fits`]).
pub fn fill_q5_0(g: &mut Q5_1x8, r: usize, b: &[u8]) {
    let d = u16::from_le_bytes([b[0], b[1]]);
    g.d[r] = d;
    g.m[r] = f16::from_f32(-16.0 * f16::from_bits(d).to_f32()).to_bits();
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    fill_codes(&mut g.codes, r, &q5_codes(qh, &b[6..22]));
}

fn f32_of(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Row `r` of a Q5_0/Q5_1 block column as 32 f32: `q · d + m`.
pub fn dequantize_q5_1(blk: &Q5_1x8, r: usize, out: &mut [f32]) {
    let (d, m) = (f32_of(blk.d[r]), f32_of(blk.m[r]));
    for (e, o) in out.iter_mut().enumerate().take(32) {
        *o = code(&blk.codes, r, e) as f32 * d + m;
    }
}

/// Row `r`'s `(d1, m1)` = `(d · sc, dmin · mn)` for Q5_K block column `blk` of super-block `s`.
#[inline]
pub fn q5k_scale_min(blk: &Q5Kx8, s: &Q4KSuper, r: usize) -> (f32, f32) {
    (
        f32_of(s.d[r]) * blk.sc[r] as f32,
        f32_of(s.dmin[r]) * blk.mn[r] as f32,
    )
}

/// Row `r` of a Q5_K block column (of super-block `s`) as 32 f32: `d1 · q − m1`, ggml's
/// expression.
pub fn dequantize_q5k(blk: &Q5Kx8, s: &Q4KSuper, r: usize, out: &mut [f32]) {
    let (d1, m1) = q5k_scale_min(blk, s, r);
    for (e, o) in out.iter_mut().enumerate().take(32) {
        *o = d1 * code(&blk.codes, r, e) as f32 - m1;
    }
}

/// Per row of a block column, `Σ_e q[r][e] · xq[e]` (exact integers).
pub fn isums(codes: &Q5Codes, xq: &[i8; 32]) -> [i32; ROWS] {
    std::array::from_fn(|r| {
        (0..32)
            .map(|e| code(codes, r, e) as i32 * xq[e] as i32)
            .sum()
    })
}

/// Portable Q5_0/Q5_1 kernel: the AVX2 kernels' very float steps (their fused
/// multiply-adds as `f32::mul_add`, the offsets added at the end), so their bits. `x` must
/// hold at least `blocks.len()` blocks.
pub fn q5_1x8_dot(blocks: &[Q5_1x8], x: &Q8_1Vector) -> [f32; ROWS] {
    let mut out = [0f32; ROWS];
    let mut offsets = [0f32; ROWS];
    for (b, blk) in blocks.iter().enumerate() {
        let isum = isums(&blk.codes, &x.qs[b]);
        for r in 0..ROWS {
            out[r] = (isum[r] as f32).mul_add(f32_of(blk.d[r]) * x.d[b], out[r]);
            offsets[r] = f32_of(blk.m[r]).mul_add(x.s[b], offsets[r]);
        }
    }
    std::array::from_fn(|r| out[r] + offsets[r])
}

/// Portable Q5_K kernel, the AVX2 kernels' very float steps as [`q5_1x8_dot`], with their
/// offsets `(−dmin) · mn` (so their bits, zeros' signs included); `supers` holds one
/// super-block per eight block columns.
pub fn q5kx8_dot(blocks: &[Q5Kx8], supers: &[Q4KSuper], x: &Q8_1Vector) -> [f32; ROWS] {
    let mut out = [0f32; ROWS];
    let mut offsets = [0f32; ROWS];
    for (b, blk) in blocks.iter().enumerate() {
        let isum = isums(&blk.codes, &x.qs[b]);
        let s = &supers[b / BLOCKS_PER_SUPER];
        for r in 0..ROWS {
            let d1 = f32_of(s.d[r]) * blk.sc[r] as f32;
            let m = -f32_of(s.dmin[r]) * blk.mn[r] as f32;
            out[r] = (isum[r] as f32).mul_add(d1 * x.d[b], out[r]);
            offsets[r] = m.mul_add(x.s[b], offsets[r]);
        }
    }
    std::array::from_fn(|r| out[r] + offsets[r])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code goes to its nibble and fifth bit and comes back; sizes as documented.
    #[test]
    fn codes_round_trip() {
        assert_eq!(Q5_1_BYTES_PER_BLOCK, 24);
        assert_eq!(Q5K_BYTES_PER_SUPER, 180);
        let mut c = Q5Codes::default();
        // Fill twice (other codes first) to check that bits are cleared as well as set.
        for pass in 0..2 {
            for r in 0..ROWS {
                let q: [u8; 32] = std::array::from_fn(|e| ((e * 11 + r * 5 + pass * 7) % 32) as u8);
                fill_codes(&mut c, r, &q);
            }
        }
        for r in 0..ROWS {
            for e in 0..32 {
                assert_eq!(
                    code(&c, r, e) as usize,
                    (e * 11 + r * 5 + 7) % 32,
                    "row {r} element {e}"
                );
            }
        }
    }
}
