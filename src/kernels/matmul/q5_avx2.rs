//! AVX2 and AVX-512 VNNI (256-bit) kernels over the 5-bit layouts ([`crate::kernels::matmul::q5`]):
//! Q5_0/Q5_1 ([`Q5_1x8`]) and Q5_K ([`Q5Kx8`]), for one to eight inputs at a time.
//!
//! The integer loop is Q4_1's ([`crate::kernels::matmul::q4_1_q8_0_avx2`]) with each chunk's fifth bits OR-ed onto its
//! nibbles (one 16-bit shift of the block's bit plane per chunk pair, two masks). Codes reach
//! 31, so two chunks' `vpmaddubsw` pair sums (≤ 2 · 2 · 31 · 127 = 15,748) are widened to
//! i32 per chunk pair rather than per block; with VNNI, `vpdpbusd` adds the products
//! straight into i32. Both give the same exact integers, then the same float steps: `acc +=
//! Σq·q_x · (d · d_x)` and `offset += m · s_x` per row, where Q5_K's `d` and `m` are `d · sc`
//! and `−(dmin · mn)` (one multiply of eight lanes each, exact, as Q4_K's). So the two
//! kernels are bit-identical, and an input's result does not depend on the batch.
//!
//! Every function here is `unsafe`: callers must have checked the CPU features, that every
//! input holds at least as many blocks as the weight slice, and (Q5_K) that `supers` holds
//! one super-block per eight block columns.
#![cfg(target_arch = "x86_64")]

use crate::kernels::matmul::q4_1_q8_0_avx2::{bcast4, f16x8};
use crate::kernels::matmul::q4_k::{Q4KSuper, BLOCKS_PER_SUPER};
use crate::kernels::matmul::q5::{Q5Codes, Q5Kx8, Q5_1x8};
use crate::kernels::matmul::q8_1::Q8_1Vector;
use std::arch::x86_64::*;

/// Chunk pair `p`'s 5-bit codes of a block column: (chunk 2p, chunk 2p + 1), one byte each.
///
/// # Safety
/// AVX2; `p < 4`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn codes(c: &Q5Codes, p: usize) -> (__m256i, __m256i) {
    let (low, bit4) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
    // SAFETY: p < 4 (caller's contract): 32 readable bytes each.
    let (v, h) = unsafe {
        (
            _mm256_loadu_si256(c.qs.get_unchecked(p).as_ptr() as *const __m256i),
            _mm256_loadu_si256(c.qh.as_ptr() as *const __m256i),
        )
    };
    // Chunk 2p's fifth bit to bit 4, chunk 2p + 1's to bit 0 (packed_q5's bit order).
    let h = _mm256_srl_epi16(h, _mm_cvtsi32_si128(p as i32));
    let w0 = _mm256_or_si256(_mm256_and_si256(v, low), _mm256_and_si256(h, bit4));
    let w1 = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi16(v, 4), low),
        _mm256_and_si256(_mm256_slli_epi16(h, 4), bit4),
    );
    (w0, w1)
}

/// The shared loop: `W · x_i` for eight rows' block columns `blocks` (their codes through
/// `codes_of`; `scale(b, blk)` the rows' `(d, m)` lanes of block column `b`) and each of
/// the `N` inputs; `vnni` picks `vpdpbusd` over `vpmaddubsw` + `vpmaddwd`.
///
/// # Safety
/// AVX2, FMA and F16C (and AVX512-VNNI + AVX512-VL with `vnni`); every input holds at least
/// `blocks.len()` blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot<B, const N: usize, const VNNI: bool>(
    blocks: &[B],
    codes_of: impl Fn(&B) -> &Q5Codes,
    mut scale: impl FnMut(usize, &B) -> (__m256, __m256),
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    let mut offsets = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<B>(), b);
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        let mut s32 = [_mm256_setzero_si256(); N];
        for p in 0..4 {
            // SAFETY: p < 4.
            let (w0, w1) = unsafe { codes(codes_of(blk), p) };
            for i in 0..N {
                // SAFETY: elements 8p .. 8p + 8 of a 32-value block.
                let (x0, x1) = unsafe { (bcast4(xq[i].add(8 * p)), bcast4(xq[i].add(8 * p + 4))) };
                if VNNI {
                    // SAFETY: the caller checked AVX512-VNNI and AVX512-VL with VNNI.
                    s32[i] = unsafe { vnni2(s32[i], (w0, x0), (w1, x1)) };
                } else {
                    let pairs = _mm256_add_epi16(
                        _mm256_maddubs_epi16(w0, x0),
                        _mm256_maddubs_epi16(w1, x1),
                    );
                    s32[i] = _mm256_add_epi32(s32[i], _mm256_madd_epi16(pairs, ones));
                }
            }
        }
        let (d, m) = scale(b, blk);
        for i in 0..N {
            // SAFETY: as above.
            let (xd, xs_) = unsafe { (*xs[i].d.get_unchecked(b), *xs[i].s.get_unchecked(b)) };
            let sc = _mm256_mul_ps(d, _mm256_set1_ps(xd));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[i]), sc, acc[i]);
            offsets[i] = _mm256_fmadd_ps(m, _mm256_set1_ps(xs_), offsets[i]);
        }
    }
    let mut out = [[0f32; 8]; N];
    for i in 0..N {
        // SAFETY: 8 writable f32.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), _mm256_add_ps(acc[i], offsets[i])) };
    }
    out
}

/// `s + w0 · x0 + w1 · x1` (u8 · i8 products of each 32-bit lane's four bytes) with
/// `vpdpbusd`.
///
/// # Safety
/// AVX512-VNNI and AVX512-VL.
#[inline]
#[target_feature(enable = "avx2,avx512vnni,avx512vl")]
unsafe fn vnni2(s: __m256i, (w0, x0): (__m256i, __m256i), (w1, x1): (__m256i, __m256i)) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(s, w0, x0), w1, x1)
}

/// The rows' `(d, m)` of a Q5_0/Q5_1 block column.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn q5_1_scale(blk: &Q5_1x8) -> (__m256, __m256) {
    (f16x8(&blk.d), f16x8(&blk.m))
}

/// The rows' `(d · sc, −(dmin · mn))` of Q5_K block column `b`, reloading its super-block's
/// `d` and `−dmin` into `sup` at each eighth column.
///
/// # Safety
/// AVX2 and F16C; `supers` holds super-block `b / 8`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn q5k_scale(
    supers: &[Q4KSuper],
    sup: &mut (__m256, __m256),
    b: usize,
    blk: &Q5Kx8,
) -> (__m256, __m256) {
    if b.is_multiple_of(BLOCKS_PER_SUPER) {
        // SAFETY: caller's contract.
        let s = unsafe { supers.get_unchecked(b / BLOCKS_PER_SUPER) };
        let sign = _mm256_set1_ps(-0.0);
        *sup = (f16x8(&s.d), _mm256_xor_ps(f16x8(&s.dmin), sign));
    }
    let lanes = |v: &[u8; 8]| {
        // SAFETY: 8 readable bytes.
        let bytes = unsafe { _mm_loadl_epi64(v.as_ptr() as *const __m128i) };
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes))
    };
    (
        _mm256_mul_ps(sup.0, lanes(&blk.sc)),
        _mm256_mul_ps(sup.1, lanes(&blk.mn)),
    )
}

/// `W · x_i` for eight Q5_0/Q5_1 rows' block columns and each of the `N` inputs.
///
/// # Safety
/// AVX2, FMA and F16C; every input holds at least `blocks.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q5_1x8_dot<const N: usize>(blocks: &[Q5_1x8], xs: [&Q8_1Vector; N]) -> [[f32; 8]; N] {
    // SAFETY: the caller's contract.
    unsafe { dot::<_, N, false>(blocks, |b| &b.codes, |_, b| q5_1_scale(b), xs) }
}

/// [`q5_1x8_dot`] with `vpdpbusd`: bit-identical results.
///
/// # Safety
/// As [`q5_1x8_dot`], and AVX512-VNNI + AVX512-VL.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub unsafe fn q5_1x8_dot_vnni<const N: usize>(
    blocks: &[Q5_1x8],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    // SAFETY: the caller's contract.
    unsafe { dot::<_, N, true>(blocks, |b| &b.codes, |_, b| q5_1_scale(b), xs) }
}

/// `W · x_i` for eight Q5_K rows' block columns (with their super-blocks) and each of the
/// `N` inputs.
///
/// # Safety
/// AVX2, FMA and F16C; every input holds at least `blocks.len()` blocks, and `supers` at
/// least `blocks.len() / 8` (rounded up).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q5kx8_dot<const N: usize>(
    blocks: &[Q5Kx8],
    supers: &[Q4KSuper],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let mut sup = (_mm256_setzero_ps(), _mm256_setzero_ps());
    // SAFETY: supers holds super-block b / 8 for every block column b (caller's contract).
    let scale = |b: usize, blk: &Q5Kx8| unsafe { q5k_scale(supers, &mut sup, b, blk) };
    // SAFETY: the caller's contract.
    unsafe { dot::<_, N, false>(blocks, |b| &b.codes, scale, xs) }
}

/// [`q5kx8_dot`] with `vpdpbusd`: bit-identical results.
///
/// # Safety
/// As [`q5kx8_dot`], and AVX512-VNNI + AVX512-VL.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub unsafe fn q5kx8_dot_vnni<const N: usize>(
    blocks: &[Q5Kx8],
    supers: &[Q4KSuper],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let mut sup = (_mm256_setzero_ps(), _mm256_setzero_ps());
    // SAFETY: as in q5kx8_dot.
    let scale = |b: usize, blk: &Q5Kx8| unsafe { q5k_scale(supers, &mut sup, b, blk) };
    // SAFETY: the caller's contract.
    unsafe { dot::<_, N, true>(blocks, |b| &b.codes, scale, xs) }
}
