//! AVX2 + FMA kernels over [`crate::kernels::matmul::float`]'s block columns (F16, BF16 and F32 weights)
//! against f32 activations, for one to four inputs at a time: per column, the eight rows'
//! weights widened to one f32 vector, times the input's value broadcast, fused into the
//! input's accumulator for that column's parity — the portable code's steps, so both give
//! the same bits, and an input's result does not depend on how many share the call.
//!
//! Every function here is `unsafe`: callers must have checked the CPU features (AVX2, FMA,
//! F16C), and that every input holds at least `32 · blocks.len()` values.
#![cfg(target_arch = "x86_64")]

use crate::kernels::matmul::float::{F32x8, H16x8, COLS};
use crate::kernels::matmul::q4_1_q8_0::ROWS;
use std::arch::x86_64::*;

/// Column `k` of an F16 block column: the eight rows' weights as f32.
///
/// # Safety
/// F16C; `k < 32`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn column_f16(blk: &H16x8, k: usize) -> __m256 {
    // SAFETY: k < 32: 16 readable bytes (eight u16); F16C (caller's contract).
    unsafe {
        let h = _mm_loadu_si128(blk.w.get_unchecked(k).as_ptr() as *const __m128i);
        _mm256_cvtph_ps(h)
    }
}

/// [`column_f16`] for BF16 (each value shifted into the top half of an f32).
///
/// # Safety
/// AVX2; `k < 32`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn column_bf16(blk: &H16x8, k: usize) -> __m256 {
    // SAFETY: as for F16; AVX2 (caller's contract).
    unsafe {
        let h = _mm_loadu_si128(blk.w.get_unchecked(k).as_ptr() as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
    }
}

/// [`column_f16`] for F32.
///
/// # Safety
/// AVX; `k < 32`.
#[inline]
#[target_feature(enable = "avx")]
unsafe fn column_f32(blk: &F32x8, k: usize) -> __m256 {
    // SAFETY: k < 32: eight readable f32.
    unsafe { _mm256_loadu_ps(blk.w.get_unchecked(k).as_ptr()) }
}

/// The shared loop: `W · x_i` for the block columns `blocks` (column `k` of one read by
/// `column`, for k < 32) and
/// each of the `N` inputs.
///
/// # Safety
/// AVX2, FMA and F16C; every input holds at least `32 · blocks.len()` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot<B, const N: usize>(
    blocks: &[B],
    column: impl Fn(&B, usize) -> __m256,
    xs: [&[f32]; N],
) -> [[f32; ROWS]; N] {
    let mut acc = [[_mm256_setzero_ps(); 2]; N];
    let next = blocks.as_ptr_range().end as *const u8;
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<B>(), b);
        for k in (0..COLS).step_by(2) {
            let (w0, w1) = (column(blk, k), column(blk, k + 1));
            for i in 0..N {
                // SAFETY: column 32b + k + 1 < 32 · blocks.len() ≤ the input's length.
                let x = unsafe { xs[i].as_ptr().add(b * COLS + k) };
                // SAFETY: as above.
                let (x0, x1) =
                    unsafe { (_mm256_broadcast_ss(&*x), _mm256_broadcast_ss(&*x.add(1))) };
                acc[i][0] = _mm256_fmadd_ps(w0, x0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(w1, x1, acc[i][1]);
            }
        }
    }
    let mut out = [[0f32; ROWS]; N];
    for i in 0..N {
        // SAFETY: eight writable f32.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), _mm256_add_ps(acc[i][0], acc[i][1])) };
    }
    out
}

/// `W · x_i` for eight rows of F16 block columns and each of `N` inputs.
///
/// # Safety
/// AVX2, FMA and F16C; every input holds at least `32 · blocks.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f16x8_dot<const N: usize>(blocks: &[H16x8], xs: [&[f32]; N]) -> [[f32; ROWS]; N] {
    // SAFETY: the features are this function's; dot asks only for k < 32.
    let column = |b: &H16x8, k: usize| unsafe { column_f16(b, k) };
    // SAFETY: the caller's contract.
    unsafe { dot(blocks, column, xs) }
}

/// [`f16x8_dot`] for BF16 block columns.
///
/// # Safety
/// As [`f16x8_dot`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn bf16x8_dot<const N: usize>(blocks: &[H16x8], xs: [&[f32]; N]) -> [[f32; ROWS]; N] {
    // SAFETY: the features are this function's; dot asks only for k < 32.
    let column = |b: &H16x8, k: usize| unsafe { column_bf16(b, k) };
    // SAFETY: the caller's contract.
    unsafe { dot(blocks, column, xs) }
}

/// [`f16x8_dot`] for F32 block columns.
///
/// # Safety
/// As [`f16x8_dot`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f32x8_dot<const N: usize>(blocks: &[F32x8], xs: [&[f32]; N]) -> [[f32; ROWS]; N] {
    // SAFETY: the features are this function's; dot asks only for k < 32.
    let column = |b: &F32x8, k: usize| unsafe { column_f32(b, k) };
    // SAFETY: the caller's contract.
    unsafe { dot(blocks, column, xs) }
}
