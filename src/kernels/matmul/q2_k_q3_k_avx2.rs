//! AVX2 and AVX-512 VNNI (256-bit) kernels over [`Q8Hx8`] block columns (8-bit unsigned
//! codes, a scale and an offset per half block: the K-quants and Q5_1), for one to eight
//! inputs at a time, as [`crate::kernels::matmul::q4_1_q8_0_avx2`]'s kernels do for Q4_1 and Q8_0.
//!
//! Per chunk, `vpmaddubsw` (u8 codes · i8 inputs) gives each row's pair sums in its own
//! 16-bit lanes; two chunks' pair sums stay within i16 (2 · 2 · 63 · 127 = 32,004), then
//! `vpmaddwd` widens them into the half's i32 sums. With VNNI, `vpdpbusd` adds each chunk's
//! u8 · i8 products straight into the i32 sums. Both give the same exact integers, and the
//! float steps after them are the same, so the two kernels' results are bit-identical, and
//! an input's result does not depend on how many inputs share the call.
//!
//! Every function here is `unsafe`: callers must have checked the CPU features, and that
//! every input holds at least as many blocks as the weight slice.
#![cfg(target_arch = "x86_64")]

use crate::kernels::matmul::q2_k_q3_k::Q8Hx8;
use crate::kernels::matmul::q4_1_q8_0_avx2::bcast4;
use crate::kernels::matmul::q8_1::Q8_1Vector;
use std::arch::x86_64::*;

/// Chunk `c` of a block column's codes.
#[inline]
#[target_feature(enable = "avx2")]
fn chunk(blk: &Q8Hx8, c: usize) -> __m256i {
    // SAFETY: 32 readable bytes.
    unsafe { _mm256_loadu_si256(blk.qs[c].as_ptr() as *const __m256i) }
}

/// The float steps shared by both kernels: `acc += Σ_h isum[h] · (d[h] · d_x) + m[h] · s_x[h]`
/// for input `x`'s block `b`.
///
/// # Safety
/// AVX2 and FMA; `b` is a block of `x`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn scale_into(acc: &mut __m256, blk: &Q8Hx8, isum: [__m256i; 2], x: &Q8_1Vector, b: usize) {
    // SAFETY: b is a block of x (caller's contract).
    let (xd, sh) = unsafe { (*x.d.get_unchecked(b), *x.s_half.get_unchecked(b)) };
    let xd = _mm256_set1_ps(xd);
    for (d, &sum) in blk.d.iter().zip(&isum) {
        // SAFETY: 8 readable f32.
        let d = unsafe { _mm256_loadu_ps(d.as_ptr()) };
        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(d, xd), *acc);
    }
    for (m, &s) in blk.m.iter().zip(&sh) {
        // SAFETY: as above.
        let m = unsafe { _mm256_loadu_ps(m.as_ptr()) };
        *acc = _mm256_fmadd_ps(m, _mm256_set1_ps(s), *acc);
    }
}

/// `W · x_i` for the eight rows whose block columns are `blocks` and each of the `N` inputs.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C, and every input must hold at least
/// `blocks.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q8hx8_dot<const N: usize>(blocks: &[Q8Hx8], xs: [&Q8_1Vector; N]) -> [[f32; 8]; N] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Q8Hx8>(), b);
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        let mut isum = [[_mm256_setzero_si256(); 2]; N];
        for c in (0..8).step_by(2) {
            let (w0, w1) = (chunk(blk, c), chunk(blk, c + 1));
            for i in 0..N {
                // SAFETY: elements 4c .. 4c + 8 of a 32-value block.
                let (x0, x1) = unsafe { (bcast4(xq[i].add(4 * c)), bcast4(xq[i].add(4 * c + 4))) };
                let pairs =
                    _mm256_add_epi16(_mm256_maddubs_epi16(w0, x0), _mm256_maddubs_epi16(w1, x1));
                let h = c / 4;
                isum[i][h] = _mm256_add_epi32(isum[i][h], _mm256_madd_epi16(pairs, ones));
            }
        }
        for i in 0..N {
            // SAFETY: b is a block of every input.
            unsafe { scale_into(&mut acc[i], blk, isum[i], xs[i], b) };
        }
    }
    let mut out = [[0f32; 8]; N];
    for i in 0..N {
        // SAFETY: 8 writable f32.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
    }
    out
}

/// [`q8hx8_dot`] with AVX-512 VNNI's `vpdpbusd` on 256-bit vectors: bit-identical results.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C, AVX512-VNNI and AVX512-VL, and every input must hold
/// at least `blocks.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub unsafe fn q8hx8_dot_vnni<const N: usize>(
    blocks: &[Q8Hx8],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let mut acc = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Q8Hx8>(), b);
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        let mut isum = [[_mm256_setzero_si256(); 2]; N];
        for c in 0..8 {
            let w = chunk(blk, c);
            for i in 0..N {
                // SAFETY: elements 4c .. 4c + 4 of a 32-value block.
                let x = unsafe { bcast4(xq[i].add(4 * c)) };
                let h = c / 4;
                isum[i][h] = _mm256_dpbusd_epi32(isum[i][h], w, x);
            }
        }
        for i in 0..N {
            // SAFETY: b is a block of every input.
            unsafe { scale_into(&mut acc[i], blk, isum[i], xs[i], b) };
        }
    }
    let mut out = [[0f32; 8]; N];
    for i in 0..N {
        // SAFETY: 8 writable f32.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
    }
    out
}
