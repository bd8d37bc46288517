//! AVX2 and AVX-512 VNNI (256-bit) kernels over Q4_K's own layout ([`crate::kernels::matmul::q4_k`]),
//! for one to eight inputs at a time: Q4_1's integer loop ([`crate::kernels::matmul::q4_1_q8_0_avx2`]) over the same
//! chunk pairs, with each block column's eight row scales rebuilt as `d · sc` and
//! `dmin · m` (one f32 multiply of eight lanes each, exact: ggml's `d1` and `m1`). The two
//! kernels' i32 sums are the same exact integers and their float steps the same, so their
//! results are bit-identical, and an input's result does not depend on the batch.
//!
//! Every function here is `unsafe`: callers must have checked the CPU features, that every
//! input holds at least as many blocks as the weight slice, and that `supers` holds one
//! super-block per eight block columns.
#![cfg(target_arch = "x86_64")]

use crate::kernels::matmul::q4_1_q8_0_avx2::{bcast4, f16x8};
use crate::kernels::matmul::q4_k::{Q4KSuper, Q4Kx8, BLOCKS_PER_SUPER};
use crate::kernels::matmul::q8_1::Q8_1Vector;
use std::arch::x86_64::*;

/// Eight u8 values as eight f32 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn u8x8(v: &[u8; 8]) -> __m256 {
    // SAFETY: 8 readable bytes.
    let bytes = unsafe { _mm_loadl_epi64(v.as_ptr() as *const __m128i) };
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes))
}

/// The scales `d · sc` and minima `dmin · m` of block column `blk`'s eight rows, from their
/// super-block's `d` and `dmin` (f32 lanes).
#[inline]
#[target_feature(enable = "avx2")]
fn scales(blk: &Q4Kx8, d: __m256, dmin: __m256) -> (__m256, __m256) {
    (
        _mm256_mul_ps(d, u8x8(&blk.sc)),
        _mm256_mul_ps(dmin, u8x8(&blk.mn)),
    )
}

/// Super-block `b / 8`'s `d` and `dmin` as f32 lanes.
///
/// # Safety
/// AVX2 and F16C; `supers` holds super-block `b / 8`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn super_scales(supers: &[Q4KSuper], b: usize) -> (__m256, __m256) {
    // SAFETY: caller's contract.
    let s = unsafe { supers.get_unchecked(b / BLOCKS_PER_SUPER) };
    (f16x8(&s.d), f16x8(&s.dmin))
}

/// `W · x_i` for the eight rows whose block columns are `blocks` (with their super-blocks
/// `supers`) and each of the `N` inputs.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every input holds at least `blocks.len()`
/// blocks, and `supers` at least `blocks.len() / 8` (rounded up).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4kx8_dot<const N: usize>(
    blocks: &[Q4Kx8],
    supers: &[Q4KSuper],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let low = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    let mut minima = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    let (mut d, mut dmin) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Q4Kx8>(), b);
        if b % BLOCKS_PER_SUPER == 0 {
            // SAFETY: supers holds super-block b / 8 (caller's contract).
            (d, dmin) = unsafe { super_scales(supers, b) };
        }
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        let mut s16 = [_mm256_setzero_si256(); N];
        for p in 0..4 {
            // SAFETY: 32 readable bytes.
            let v = unsafe { _mm256_loadu_si256(blk.qs[p].as_ptr() as *const __m256i) };
            let w0 = _mm256_and_si256(v, low);
            let w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            for i in 0..N {
                // SAFETY: elements 8p .. 8p + 8 of a 32-value block.
                let (x0, x1) = unsafe { (bcast4(xq[i].add(8 * p)), bcast4(xq[i].add(8 * p + 4))) };
                s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(w0, x0));
                s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(w1, x1));
            }
        }
        let (d1, m1) = scales(blk, d, dmin);
        for i in 0..N {
            // SAFETY: as above.
            let (xd, xs_) = unsafe { (*xs[i].d.get_unchecked(b), *xs[i].s.get_unchecked(b)) };
            let sums = _mm256_madd_epi16(s16[i], ones);
            let scale = _mm256_mul_ps(d1, _mm256_set1_ps(xd));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[i]);
            minima[i] = _mm256_fmadd_ps(m1, _mm256_set1_ps(xs_), minima[i]);
        }
    }
    let mut out = [[0f32; 8]; N];
    for i in 0..N {
        // SAFETY: 8 writable f32.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), _mm256_sub_ps(acc[i], minima[i])) };
    }
    out
}

/// [`q4kx8_dot`] with AVX-512 VNNI's `vpdpbusd` on 256-bit vectors: bit-identical results.
///
/// # Safety
/// As [`q4kx8_dot`], and the CPU must support AVX512-VNNI and AVX512-VL.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub unsafe fn q4kx8_dot_vnni<const N: usize>(
    blocks: &[Q4Kx8],
    supers: &[Q4KSuper],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let low = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); N];
    let mut minima = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    let (mut d, mut dmin) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Q4Kx8>(), b);
        if b % BLOCKS_PER_SUPER == 0 {
            // SAFETY: supers holds super-block b / 8 (caller's contract).
            (d, dmin) = unsafe { super_scales(supers, b) };
        }
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        // Two accumulators per input below four inputs, as crate::kernels::matmul::q4_1_q8_0_avx2's VNNI kernels.
        let mut s32 = [_mm256_setzero_si256(); N];
        let mut t32 = [_mm256_setzero_si256(); N];
        for p in 0..4 {
            // SAFETY: 32 readable bytes.
            let v = unsafe { _mm256_loadu_si256(blk.qs[p].as_ptr() as *const __m256i) };
            let w0 = _mm256_and_si256(v, low);
            let w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            for i in 0..N {
                // SAFETY: elements 8p .. 8p + 8 of a 32-value block.
                let (x0, x1) = unsafe { (bcast4(xq[i].add(8 * p)), bcast4(xq[i].add(8 * p + 4))) };
                s32[i] = _mm256_dpbusd_epi32(s32[i], w0, x0);
                if N >= 4 {
                    s32[i] = _mm256_dpbusd_epi32(s32[i], w1, x1);
                } else {
                    t32[i] = _mm256_dpbusd_epi32(t32[i], w1, x1);
                }
            }
        }
        let (d1, m1) = scales(blk, d, dmin);
        for i in 0..N {
            // SAFETY: as above.
            let (xd, xs_) = unsafe { (*xs[i].d.get_unchecked(b), *xs[i].s.get_unchecked(b)) };
            let sums = if N >= 4 {
                s32[i]
            } else {
                _mm256_add_epi32(s32[i], t32[i])
            };
            let scale = _mm256_mul_ps(d1, _mm256_set1_ps(xd));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[i]);
            minima[i] = _mm256_fmadd_ps(m1, _mm256_set1_ps(xs_), minima[i]);
        }
    }
    let mut out = [[0f32; 8]; N];
    for i in 0..N {
        // SAFETY: 8 writable f32.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), _mm256_sub_ps(acc[i], minima[i])) };
    }
    out
}
