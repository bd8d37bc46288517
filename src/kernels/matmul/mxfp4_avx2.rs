//! AVX2 and AVX-512 VNNI kernels over eight interleaved MXFP4 rows
//! ([`crate::kernels::matmul::mxfp4`]), for one to eight inputs at a time.
//!
//! Each 32-byte chunk pair is split into its low and high nibbles and looked up with
//! `vpshufb` into i8 codes `k` (AVX2: `|k|` against the input with `k`'s sign, `vpmaddubsw`,
//! pair sums at most 2 · 12 · 128, a block's at most 24,576: 16 bits hold it) or into
//! `k + 12` (VNNI: `vpdpbusd` straight into i32, less `12 · Σ q_x`). Both give the exact
//! integer `Σ k · q_x` per row, then the same float steps: the rows' scales `2^(e − 128)`
//! built from their bytes, times the input's scale, one fused multiply-add. The same bits
//! as the portable kernel, whatever the number of inputs.
//!
//! Every function here is `unsafe`: callers must have checked the CPU features and that
//! every input holds at least as many blocks as the weight slice.
#![cfg(target_arch = "x86_64")]

use crate::kernels::matmul::mxfp4::{Mxfp4x8, KVALUES};
use crate::kernels::matmul::q4_1_q8_0_avx2::bcast4;
use crate::kernels::matmul::q8_1::Q8_1Vector;
use std::arch::x86_64::*;

/// The eight rows' scales `2^(e − 128)` as f32 lanes, exactly as
/// [`crate::kernels::matmul::mxfp4::e8m0_half`]: `(e − 1) << 23`, or `2^−21 << e` below 2.
#[inline]
#[target_feature(enable = "avx2")]
fn scales(e: &[u8; 8]) -> __m256 {
    // SAFETY: 8 readable bytes.
    let e = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(e.as_ptr() as *const __m128i) });
    let normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    let tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    let below_two = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, below_two))
}

/// A 16-entry byte table in both 128-bit lanes, for `vpshufb`.
#[inline]
#[target_feature(enable = "avx2")]
fn table(offset: i8) -> __m256i {
    let t: [i8; 16] = std::array::from_fn(|i| KVALUES[i] + offset);
    // SAFETY: 16 readable bytes.
    let t = unsafe { _mm_loadu_si128(t.as_ptr() as *const __m128i) };
    _mm256_broadcastsi128_si256(t)
}

/// `W · x_i` for the eight rows whose block columns are `blocks` and each of the `N` inputs.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and every input must hold at least `blocks.len()`
/// blocks.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn mxfp4x8_dot<const N: usize>(
    blocks: &[Mxfp4x8],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let (low, ones, codes) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi16(1), table(0));
    let mut acc = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Mxfp4x8>(), b);
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        let mut s16 = [_mm256_setzero_si256(); N];
        for p in 0..4 {
            // SAFETY: 32 readable bytes.
            let v = unsafe { _mm256_loadu_si256(blk.qs[p].as_ptr() as *const __m256i) };
            let k0 = _mm256_shuffle_epi8(codes, _mm256_and_si256(v, low));
            let k1 = _mm256_shuffle_epi8(codes, _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
            let (a0, a1) = (_mm256_sign_epi8(k0, k0), _mm256_sign_epi8(k1, k1));
            for i in 0..N {
                // SAFETY: elements 8p .. 8p + 8 of a 32-value block.
                let (x0, x1) = unsafe { (bcast4(xq[i].add(8 * p)), bcast4(xq[i].add(8 * p + 4))) };
                let t0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(x0, k0));
                let t1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(x1, k1));
                s16[i] = _mm256_add_epi16(s16[i], _mm256_add_epi16(t0, t1));
            }
        }
        let d = scales(&blk.e);
        for i in 0..N {
            // SAFETY: as above.
            let xd = unsafe { *xs[i].d.get_unchecked(b) };
            let sums = _mm256_madd_epi16(s16[i], ones);
            let scale = _mm256_mul_ps(d, _mm256_set1_ps(xd));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[i]);
        }
    }
    let mut out = [[0f32; 8]; N];
    for i in 0..N {
        // SAFETY: 8 writable f32.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
    }
    out
}

/// [`mxfp4x8_dot`] with AVX-512 VNNI (`vpdpbusd`, 256-bit) on the codes lifted to `k + 12`:
/// the same exact integer sums once `12 · Σ q_x` is taken off, the same float steps, the same
/// bits.
///
/// # Safety
/// The CPU must support AVX2, FMA, AVX512-VNNI and AVX512-VL, and every input must hold at
/// least `blocks.len()` blocks.
#[target_feature(enable = "avx2,fma,avx512vnni,avx512vl")]
pub unsafe fn mxfp4x8_dot_vnni<const N: usize>(
    blocks: &[Mxfp4x8],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let (low, lifted) = (_mm256_set1_epi8(0x0F), table(12));
    let mut acc = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Mxfp4x8>(), b);
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        let mut s32 = [_mm256_setzero_si256(); N];
        let mut t32 = [_mm256_setzero_si256(); N];
        for p in 0..4 {
            // SAFETY: 32 readable bytes.
            let v = unsafe { _mm256_loadu_si256(blk.qs[p].as_ptr() as *const __m256i) };
            let u0 = _mm256_shuffle_epi8(lifted, _mm256_and_si256(v, low));
            let u1 = _mm256_shuffle_epi8(lifted, _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
            for i in 0..N {
                // SAFETY: elements 8p .. 8p + 8 of a 32-value block.
                let (x0, x1) = unsafe { (bcast4(xq[i].add(8 * p)), bcast4(xq[i].add(8 * p + 4))) };
                s32[i] = _mm256_dpbusd_epi32(s32[i], u0, x0);
                // One accumulator from four inputs on, as in q4_1x8_dot_vnni.
                if N >= 4 {
                    s32[i] = _mm256_dpbusd_epi32(s32[i], u1, x1);
                } else {
                    t32[i] = _mm256_dpbusd_epi32(t32[i], u1, x1);
                }
            }
        }
        let d = scales(&blk.e);
        for i in 0..N {
            // SAFETY: as above.
            let (xd, qsum) = unsafe { (*xs[i].d.get_unchecked(b), *xs[i].qsum.get_unchecked(b)) };
            let total = if N >= 4 {
                s32[i]
            } else {
                _mm256_add_epi32(s32[i], t32[i])
            };
            let sums = _mm256_sub_epi32(total, _mm256_set1_epi32(12 * qsum));
            let scale = _mm256_mul_ps(d, _mm256_set1_ps(xd));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[i]);
        }
    }
    let mut out = [[0f32; 8]; N];
    for i in 0..N {
        // SAFETY: 8 writable f32.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
    }
    out
}
