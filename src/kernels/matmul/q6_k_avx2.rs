//! AVX2 and AVX-512 VNNI (256-bit) kernels over Q6_K's own layout ([`crate::kernels::matmul::q6_k`]),
//! for one to eight inputs at a time. Each chunk's 6-bit codes are rebuilt from their low
//! nibbles and high bit pairs (a shift, a mask, an or), multiplied with the input's 8-bit
//! values into per-half i32 sums (`vpmaddubsw` + `vpmaddwd`, or VNNI's `vpdpbusd`: the same
//! exact integers), the code bias taken off exactly (`32 · Σ q_x`), then scaled by `d · sc`
//! for the eight rows. The two kernels' float steps are the same, so their results are
//! bit-identical, and an input's result does not depend on the batch.
//!
//! Every function here is `unsafe`: callers must have checked the CPU features, that every
//! input holds at least as many blocks as the weight slice, and that `supers` holds one
//! super-block per eight block columns.
#![cfg(target_arch = "x86_64")]

use crate::kernels::matmul::q4_1_q8_0_avx2::{bcast4, f16x8};
use crate::kernels::matmul::q6_k::{Q6KSuper, Q6Kx8, BLOCKS_PER_SUPER};
use crate::kernels::matmul::q8_1::Q8_1Vector;
use std::arch::x86_64::*;

/// The 6-bit codes (as u8 lanes) of chunks `2p` and `2p + 1` of `blk`.
#[inline]
#[target_feature(enable = "avx2")]
fn codes(blk: &Q6Kx8, p: usize) -> (__m256i, __m256i) {
    let low = _mm256_set1_epi8(0x0F);
    let top = _mm256_set1_epi8(0x30);
    // SAFETY: 32 readable bytes each.
    let (v, h) = unsafe {
        (
            _mm256_loadu_si256(blk.ql[p].as_ptr() as *const __m256i),
            _mm256_loadu_si256(blk.qh[p / 2].as_ptr() as *const __m256i),
        )
    };
    // Chunk 2p's high bits sit at bits 4(p % 2) .. +2 of h, chunk 2p + 1's two bits above:
    // moved to bits 4 and 5 (shifts across a 16-bit lane only bring in bits the mask drops).
    let (h0, h1) = if p.is_multiple_of(2) {
        (_mm256_slli_epi16(h, 4), _mm256_slli_epi16(h, 2))
    } else {
        (h, _mm256_srli_epi16(h, 2))
    };
    (
        _mm256_or_si256(_mm256_and_si256(v, low), _mm256_and_si256(h0, top)),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(v, 4), low),
            _mm256_and_si256(h1, top),
        ),
    )
}

/// `acc += Σ_h (isum[h] − 32 · Σ q_x[h]) · (d · sc[h] · d_x)` for input `x`'s block `b`
/// (`d`: the super-block's scales, f32 lanes).
///
/// # Safety
/// AVX2 and FMA; `b` is a block of `x`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn scale_into(
    acc: &mut __m256,
    blk: &Q6Kx8,
    d: __m256,
    isum: [__m256i; 2],
    x: &Q8_1Vector,
    b: usize,
) {
    // SAFETY: b is a block of x (caller's contract).
    let (xd, qsum) = unsafe { (*x.d.get_unchecked(b), *x.qsum_half.get_unchecked(b)) };
    for ((sc, &sum), q) in blk.sc.iter().zip(&isum).zip(qsum) {
        // SAFETY: 8 readable bytes.
        let sc = unsafe { _mm_loadl_epi64(sc.as_ptr() as *const __m128i) };
        let scale = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
        let exact = _mm256_sub_epi32(sum, _mm256_set1_epi32(32 * q));
        *acc = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(exact),
            _mm256_mul_ps(scale, _mm256_set1_ps(xd)),
            *acc,
        );
    }
}

/// `W · x_i` for the eight rows whose block columns are `blocks` (with their super-blocks
/// `supers`) and each of the `N` inputs.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every input holds at least `blocks.len()`
/// blocks, and `supers` at least `blocks.len() / 8` (rounded up).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q6kx8_dot<const N: usize>(
    blocks: &[Q6Kx8],
    supers: &[Q6KSuper],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    let mut d = _mm256_setzero_ps();
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Q6Kx8>(), b);
        if b % BLOCKS_PER_SUPER == 0 {
            // SAFETY: supers holds super-block b / 8 (caller's contract).
            d = f16x8(unsafe { &supers.get_unchecked(b / BLOCKS_PER_SUPER).d });
        }
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        let mut isum = [[_mm256_setzero_si256(); 2]; N];
        for p in 0..4 {
            let (w0, w1) = codes(blk, p);
            for i in 0..N {
                // SAFETY: elements 8p .. 8p + 8 of a 32-value block.
                let (x0, x1) = unsafe { (bcast4(xq[i].add(8 * p)), bcast4(xq[i].add(8 * p + 4))) };
                // Two chunks' pair sums stay within i16: 2 · 2 · 63 · 127 = 32,004.
                let pairs =
                    _mm256_add_epi16(_mm256_maddubs_epi16(w0, x0), _mm256_maddubs_epi16(w1, x1));
                let h = p / 2;
                isum[i][h] = _mm256_add_epi32(isum[i][h], _mm256_madd_epi16(pairs, ones));
            }
        }
        for i in 0..N {
            // SAFETY: b is a block of every input.
            unsafe { scale_into(&mut acc[i], blk, d, isum[i], xs[i], b) };
        }
    }
    let mut out = [[0f32; 8]; N];
    for i in 0..N {
        // SAFETY: 8 writable f32.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
    }
    out
}

/// [`q6kx8_dot`] with AVX-512 VNNI's `vpdpbusd` on 256-bit vectors: bit-identical results.
///
/// # Safety
/// As [`q6kx8_dot`], and the CPU must support AVX512-VNNI and AVX512-VL.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub unsafe fn q6kx8_dot_vnni<const N: usize>(
    blocks: &[Q6Kx8],
    supers: &[Q6KSuper],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let mut acc = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    let mut d = _mm256_setzero_ps();
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Q6Kx8>(), b);
        if b % BLOCKS_PER_SUPER == 0 {
            // SAFETY: supers holds super-block b / 8 (caller's contract).
            d = f16x8(unsafe { &supers.get_unchecked(b / BLOCKS_PER_SUPER).d });
        }
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        let mut isum = [[_mm256_setzero_si256(); 2]; N];
        for p in 0..4 {
            let (w0, w1) = codes(blk, p);
            for i in 0..N {
                // SAFETY: elements 8p .. 8p + 8 of a 32-value block.
                let (x0, x1) = unsafe { (bcast4(xq[i].add(8 * p)), bcast4(xq[i].add(8 * p + 4))) };
                let h = p / 2;
                isum[i][h] = _mm256_dpbusd_epi32(isum[i][h], w0, x0);
                isum[i][h] = _mm256_dpbusd_epi32(isum[i][h], w1, x1);
            }
        }
        for i in 0..N {
            // SAFETY: b is a block of every input.
            unsafe { scale_into(&mut acc[i], blk, d, isum[i], xs[i], b) };
        }
    }
    let mut out = [[0f32; 8]; N];
    for i in 0..N {
        // SAFETY: 8 writable f32.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
    }
    out
}
