//! Q6_K in its own bytes: eight-row block columns of 6-bit codes — the low four bits in
//! Q4_1's chunk pairs, the high two in two more 32-byte vectors — with each row's signed
//! 8-bit scale per half block, and per super-block (eight block columns) the rows' f16
//! scale `d` (`quant_kquants.rs` repacks ggml's `block_q6_K` into this). 208 bytes per block
//! column plus 16 per super-block: 210 bytes per row of 256 weights, the file's own size.
//!
//! ggml's weight is `d · sc · (q − 32)` (ggml-quants.c's `dequantize_row_q6_K`, scales per
//! 16 weights); the kernels rebuild `d · sc` for eight rows in one vector multiply (exact in
//! f32: 11 + 8 significant bits) and take the bias off the exact integer sum:
//! `Σ w·x ≈ d · sc · d_x · (Σ q · q_x − 32 · Σ q_x)` per half block.
//!
//! High bits: byte s of `qh[k]` holds, in bits `2j, 2j + 1`, the high bits of slot s of chunk
//! `4k + j` (chunks as in [`crate::kernels::matmul::q4_1_q8_0`]: chunk c holds elements `4c .. 4c + 4`).
use crate::kernels::matmul::q4_1_q8_0::{self, chunk_slot, ROWS};
use crate::kernels::matmul::q8_1::Q8_1Vector;
use half::f16;

/// Block columns per super-block (256 weights).
pub use crate::kernels::matmul::q4_k::BLOCKS_PER_SUPER;

/// One block column (32 values) of eight Q6_K rows: `w[r][j] = d[r] · sc[j / 16][r] ·
/// (q[r][j] − 32)`, `d` from the row's [`Q6KSuper`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Q6Kx8 {
    /// Per half, per row: the scale of 16 weights.
    pub sc: [[i8; ROWS]; 2],
    /// The codes' low four bits in chunk pairs, as [`crate::kernels::matmul::q4_1_q8_0::Q4_1x8::qs`].
    pub ql: [[u8; 32]; 4],
    /// The codes' high two bits, four chunks per vector (see the module's docs).
    pub qh: [[u8; 32]; 2],
}

/// The f16 scale of eight rows' super-block (eight block columns).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Q6KSuper {
    /// Per row: super-block scale, f16 bits.
    pub d: [u16; ROWS],
}

/// Bytes per row of a 256-weight super-block held this way: (8 · 208 + 16) / 8 = 210.
pub const Q6K_BYTES_PER_SUPER: usize =
    (BLOCKS_PER_SUPER * std::mem::size_of::<Q6Kx8>() + std::mem::size_of::<Q6KSuper>()) / ROWS;

/// Row `r` of `g` from its 32 codes (0..=63) in element order and its two half scales.
pub fn fill_q6k(g: &mut Q6Kx8, r: usize, q: &[u8; 32], sc: [i8; 2]) {
    g.sc[0][r] = sc[0];
    g.sc[1][r] = sc[1];
    let nibbles: [u8; 16] = std::array::from_fn(|l| (q[l] & 0x0F) | ((q[l + 16] & 0x0F) << 4));
    q4_1_q8_0::fill_nibbles(&mut g.ql, r, &nibbles);
    for (e, &code) in q.iter().enumerate() {
        let (c, s) = chunk_slot(r, e);
        let at = &mut g.qh[c / 4][s];
        *at = (*at & !(3 << (2 * (c % 4)))) | ((code >> 4) << (2 * (c % 4)));
    }
}

/// Element `e` of row `r`'s codes (0..=63).
#[inline]
pub fn q6k_code(blk: &Q6Kx8, r: usize, e: usize) -> u8 {
    let (c, s) = chunk_slot(r, e);
    q4_1_q8_0::nibble_code(&blk.ql, r, e) | (((blk.qh[c / 4][s] >> (2 * (c % 4))) & 3) << 4)
}

/// Row `r`'s scale of half `h`: `d · sc`, as ggml computes it.
#[inline]
pub fn half_scale(blk: &Q6Kx8, s: &Q6KSuper, r: usize, h: usize) -> f32 {
    f16::from_bits(s.d[r]).to_f32() * blk.sc[h][r] as f32
}

/// Row `r` of block column `blk` (of super-block `s`) as 32 f32 values: `d · sc · (q − 32)`,
/// ggml's expression.
pub fn dequantize_q6k(blk: &Q6Kx8, s: &Q6KSuper, r: usize, out: &mut [f32]) {
    for (e, o) in out.iter_mut().enumerate().take(32) {
        *o = half_scale(blk, s, r, e / 16) * (q6k_code(blk, r, e) as i32 - 32) as f32;
    }
}

/// Portable version of the AVX2 kernel, its very float steps (one fused multiply-add per
/// half, `f32::mul_add`, half 0 then half 1), so its bits. `x` must hold at least
/// `blocks.len()` blocks, and `supers` one per eight.
pub fn q6kx8_dot(blocks: &[Q6Kx8], supers: &[Q6KSuper], x: &Q8_1Vector) -> [f32; ROWS] {
    let mut out = [0f32; ROWS];
    for (b, blk) in blocks.iter().enumerate() {
        let s = &supers[b / BLOCKS_PER_SUPER];
        let xq = &x.qs[b];
        for (r, o) in out.iter_mut().enumerate() {
            for h in 0..2 {
                let isum: i32 = (16 * h..16 * h + 16)
                    .map(|e| q6k_code(blk, r, e) as i32 * xq[e] as i32)
                    .sum::<i32>()
                    - 32 * x.qsum_half[b][h];
                *o = (isum as f32).mul_add(half_scale(blk, s, r, h) * x.d[b], *o);
            }
        }
    }
    out
}
