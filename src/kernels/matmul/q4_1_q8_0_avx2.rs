//! AVX2 + FMA + F16C kernels over eight interleaved weight rows ([`crate::kernels::matmul::q4_1_q8_0`]), for
//! one to four inputs at a time.
//!
//! A block column's weights come in chunks of four elements of each of the eight rows. For
//! every chunk, the input's four i8 values are broadcast to the eight rows and multiplied
//! with `vpmaddubsw` (u8·i8 → i16 pair sums): each row's partial sum lands in its own two
//! 16-bit lanes, so the eight rows never need a horizontal fold. Q4_1 sums stay in 16 bits
//! for a whole block (at most 8 · 2 · 15 · 127 = 30,480), then `vpmaddwd` gives one i32 per
//! row; Q8_0 (signed weights, pairs up to 2 · 128 · 127) widens every chunk. The i32 block
//! sum is exact, then scaled by the eight rows' f16 scales at once.
//!
//! Several inputs (the rows of a batched decode step) share each unpacked chunk: the weights
//! are read and unpacked once for up to four inputs. Each input's arithmetic is the same
//! whatever the number of inputs (the integer sums are exact, the float steps the same), so
//! a row's result never depends on the batch.
//!
//! Each call prefetches the next group's blocks (adjacent in memory), a share per block
//! column ([`crate::kernels::prefetch_next`]). An earlier prefetch a fixed 0.5–8 KiB ahead in the
//! same run measured slower; the next-group prefetch measured faster, on this path too
//! (docs/benchmarks.md, "Prefetching the next group").
//!
//! Every function here is `unsafe`: callers must have checked that the CPU has AVX2, FMA
//! and F16C ([`crate::kernels::matmul`] does, once per call), and that every input holds at least as
//! many blocks as the weight slice.
#![cfg(target_arch = "x86_64")]

use crate::kernels::matmul::q4_1_q8_0::{Q4_1x8, Q8_0x8};
use crate::kernels::matmul::q8_1::Q8_1Vector;
use std::arch::x86_64::*;

/// Eight f16 values (raw bits) as eight f32 lanes.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn f16x8(bits: &[u16; 8]) -> __m256 {
    // SAFETY: `bits` is 16 readable bytes; loadu has no alignment requirement.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(bits.as_ptr() as *const __m128i)) }
}

/// Four i8 values at `p` broadcast to all eight 32-bit lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn bcast4(p: *const i8) -> __m256i {
    // SAFETY: the caller passes a pointer to 4 readable bytes.
    _mm256_set1_epi32(unsafe { std::ptr::read_unaligned(p as *const i32) })
}

/// `W · x_i` for the eight rows whose block columns are `blocks` (Q4_1 weights,
/// `w = d·q + m`) and each of the `N` inputs: `out[i]` = the eight row results for `xs[i]`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C, and every input must hold at least
/// `blocks.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4_1x8_dot<const N: usize>(blocks: &[Q4_1x8], xs: [&Q8_1Vector; N]) -> [[f32; 8]; N] {
    let low = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    let mut offsets = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Q4_1x8>(), b);
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
        let (d, m) = (f16x8(&blk.d), f16x8(&blk.m));
        for i in 0..N {
            // SAFETY: as above.
            let (xd, xs_) = unsafe { (*xs[i].d.get_unchecked(b), *xs[i].s.get_unchecked(b)) };
            let sums = _mm256_madd_epi16(s16[i], ones);
            let scale = _mm256_mul_ps(d, _mm256_set1_ps(xd));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[i]);
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

/// `W · x_i` for the eight rows whose block columns are `blocks` (Q8_0 weights, `w = d·q`)
/// and each of the `N` inputs.
///
/// # Safety
/// As [`q4_1x8_dot`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q8_0x8_dot<const N: usize>(blocks: &[Q8_0x8], xs: [&Q8_1Vector; N]) -> [[f32; 8]; N] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Q8_0x8>(), b);
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        let mut s32 = [_mm256_setzero_si256(); N];
        for c in 0..8 {
            // SAFETY: 32 readable bytes.
            let w = unsafe { _mm256_loadu_si256(blk.qs[c].as_ptr() as *const __m256i) };
            // i8·i8 as u8·i8: |w| · (x with w's sign); exact for w = -128 too (|w| as u8).
            let aw = _mm256_sign_epi8(w, w);
            for i in 0..N {
                // SAFETY: elements 4c .. 4c + 4 of a 32-value block.
                let x = unsafe { bcast4(xq[i].add(4 * c)) };
                let pairs = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
                s32[i] = _mm256_add_epi32(s32[i], _mm256_madd_epi16(pairs, ones));
            }
        }
        let d = f16x8(&blk.d);
        for i in 0..N {
            // SAFETY: as above.
            let xd = unsafe { *xs[i].d.get_unchecked(b) };
            let scale = _mm256_mul_ps(d, _mm256_set1_ps(xd));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[i]), scale, acc[i]);
        }
    }
    let mut out = [[0f32; 8]; N];
    for i in 0..N {
        // SAFETY: 8 writable f32.
        unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
    }
    out
}

/// [`q4_1x8_dot`] with AVX-512 VNNI (`vpdpbusd`, 256-bit): each chunk's u8·i8 products go
/// straight into the rows' i32 sums in one instruction. The i32 block sums are the same exact
/// integers as [`q4_1x8_dot`]'s, and the float steps are the same, so the results are
/// bit-identical.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C, AVX512-VNNI and AVX512-VL, and every input must hold
/// at least `blocks.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub unsafe fn q4_1x8_dot_vnni<const N: usize>(
    blocks: &[Q4_1x8],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let low = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); N];
    let mut offsets = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Q4_1x8>(), b);
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        // Below four inputs, two accumulators per input (even and odd chunks): vpdpbusd's
        // latency would otherwise chain eight deep per block. From four inputs on, the
        // inputs' chains already overlap, and one accumulator each keeps the eight inputs'
        // state in registers (AVX-512VL has 32); the exact integer sum is the same.
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
        let (d, m) = (f16x8(&blk.d), f16x8(&blk.m));
        for i in 0..N {
            // SAFETY: as above.
            let (xd, xs_) = unsafe { (*xs[i].d.get_unchecked(b), *xs[i].s.get_unchecked(b)) };
            let scale = _mm256_mul_ps(d, _mm256_set1_ps(xd));
            let sums = if N >= 4 {
                s32[i]
            } else {
                _mm256_add_epi32(s32[i], t32[i])
            };
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[i]);
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

/// [`q8_0x8_dot`] with AVX-512 VNNI: the signed weights are shifted to `w + 128` (u8) for
/// `vpdpbusd`, and `128 · Σx` is taken off each block sum, which gives the same exact i32 as
/// [`q8_0x8_dot`] (bit-identical results).
///
/// # Safety
/// As [`q4_1x8_dot_vnni`].
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub unsafe fn q8_0x8_dot_vnni<const N: usize>(
    blocks: &[Q8_0x8],
    xs: [&Q8_1Vector; N],
) -> [[f32; 8]; N] {
    let flip = _mm256_set1_epi8(-128);
    let mut acc = [_mm256_setzero_ps(); N];
    let next = blocks.as_ptr_range().end as *const u8;
    for (b, blk) in blocks.iter().enumerate() {
        crate::kernels::prefetch_next(next, std::mem::size_of::<Q8_0x8>(), b);
        // SAFETY: b < blocks.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        let mut s32 = [_mm256_setzero_si256(); N];
        let mut t32 = [_mm256_setzero_si256(); N];
        for c in (0..8).step_by(2) {
            // SAFETY: 2 × 32 readable bytes.
            let (w0, w1) = unsafe {
                (
                    _mm256_loadu_si256(blk.qs[c].as_ptr() as *const __m256i),
                    _mm256_loadu_si256(blk.qs[c + 1].as_ptr() as *const __m256i),
                )
            };
            // w + 128 as u8.
            let (u0, u1) = (_mm256_xor_si256(w0, flip), _mm256_xor_si256(w1, flip));
            for i in 0..N {
                // SAFETY: elements 4c .. 4c + 8 of a 32-value block.
                let (x0, x1) = unsafe { (bcast4(xq[i].add(4 * c)), bcast4(xq[i].add(4 * c + 4))) };
                s32[i] = _mm256_dpbusd_epi32(s32[i], u0, x0);
                // One accumulator from four inputs on, as in q4_1x8_dot_vnni.
                if N >= 4 {
                    s32[i] = _mm256_dpbusd_epi32(s32[i], u1, x1);
                } else {
                    t32[i] = _mm256_dpbusd_epi32(t32[i], u1, x1);
                }
            }
        }
        let d = f16x8(&blk.d);
        for i in 0..N {
            // SAFETY: as above.
            let (xd, qsum) = unsafe { (*xs[i].d.get_unchecked(b), *xs[i].qsum.get_unchecked(b)) };
            let total = if N >= 4 {
                s32[i]
            } else {
                _mm256_add_epi32(s32[i], t32[i])
            };
            let sums = _mm256_sub_epi32(total, _mm256_set1_epi32(128 * qsum));
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
