//! The AVX-512 VNNI kernels on 512-bit vectors: two eight-row groups ([`crate::kernels::matmul::q4_1_q8_0`]) at
//! once, group `g` in the low 256 bits and group `g + 1` in the high 256 bits of every
//! vector, so one `vpdpbusd` serves 16 weight rows.
//!
//! Where the CPU runs 512-bit integer and FMA instructions at twice the 256-bit rate (Intel
//! Xeon since Skylake-SP, with two 512-bit FMA units), this halves the instructions of a
//! batched decode step (measured: docs/benchmarks.md, "`vpdpbusd` on 512-bit vectors"). On
//! Zen 4 (512-bit ops in two halves) it issues half the instructions for the same work.
//!
//! Each lane does exactly what the same row's lane does in the 256-bit kernels
//! ([`crate::kernels::matmul::q4_1_q8_0_avx2::q4_1x8_dot_vnni`], [`crate::kernels::matmul::q4_1_q8_0_avx2::q8_0x8_dot_vnni`]): exact i32 block sums,
//! then the same float steps in the same order, so the results are bit-identical to theirs
//! (tested in [`crate::kernels::matmul`]).
//!
//! Every function here is `unsafe`: callers must have checked that the CPU has AVX-512F,
//! AVX-512BW and AVX-512 VNNI, and that every input holds at least as many blocks as each
//! weight slice.
#![cfg(target_arch = "x86_64")]

use crate::kernels::matmul::q4_1_q8_0::{PairBlocks, Q4_1x8, Q8_0x8};
use crate::kernels::matmul::q8_1::Q8_1Vector;
use crate::kernels::prefetch_next;
use std::arch::x86_64::*;

/// The f16 values (raw bits) of two groups' eight rows as 16 f32 lanes: `lo` in lanes 0..8,
/// `hi` in lanes 8..16.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn f16x16(lo: &[u16; 8], hi: &[u16; 8]) -> __m512 {
    // SAFETY: each array is 16 readable bytes; loadu has no alignment requirement.
    let both = unsafe {
        _mm256_set_m128i(
            _mm_loadu_si128(hi.as_ptr() as *const __m128i),
            _mm_loadu_si128(lo.as_ptr() as *const __m128i),
        )
    };
    _mm512_cvtph_ps(both)
}

/// 32 bytes at `lo` in the low half, 32 bytes at `hi` in the high half.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn pair(lo: *const u8, hi: *const u8) -> __m512i {
    // SAFETY: the caller passes pointers to 32 readable bytes each.
    unsafe {
        _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(lo as *const __m256i)),
            _mm256_loadu_si256(hi as *const __m256i),
            1,
        )
    }
}

/// Four i8 values at `p` broadcast to all sixteen 32-bit lanes.
#[inline]
#[target_feature(enable = "avx512f")]
fn bcast4(p: *const i8) -> __m512i {
    // SAFETY: the caller passes a pointer to 4 readable bytes.
    _mm512_set1_epi32(unsafe { std::ptr::read_unaligned(p as *const i32) })
}

/// `W · x_i` for the 16 rows of two consecutive groups, whose block columns are `w`'s
/// (rows 0..8 the first group's, 8..16 the second's; [`PairBlocks`]), Q4_1 weights
/// `w = d·q + m`, and each of the `N` inputs: `out[i]` = the 16 row results for `xs[i]`.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and AVX-512 VNNI; every input holds at least
/// `w.len()` blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn q4_1x16_dot<const N: usize>(
    w: PairBlocks<'_, Q4_1x8>,
    xs: [&Q8_1Vector; N],
) -> [[f32; 16]; N] {
    let low = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); N];
    let mut offsets = [_mm512_setzero_ps(); N];
    // Two inputs or more: prefetch in either layout (see PairBlocks::prefetch).
    let (next, prefetch) = (w.end(), w.prefetch() || N >= 2);
    for b in 0..w.len() {
        let (bl, bh) = w.get(b);
        if prefetch {
            prefetch_next(next, 2 * std::mem::size_of::<Q4_1x8>(), b);
        }
        // SAFETY: b < w.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        // Two accumulators per input below four inputs (vpdpbusd's latency), one from four
        // on, as in the 256-bit kernel; the exact integer sum is the same.
        let mut s32 = [_mm512_setzero_si512(); N];
        let mut t32 = [_mm512_setzero_si512(); N];
        for p in 0..4 {
            let v = pair(bl.qs[p].as_ptr(), bh.qs[p].as_ptr());
            let w0 = _mm512_and_si512(v, low);
            let w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
            for i in 0..N {
                // SAFETY: elements 8p .. 8p + 8 of a 32-value block.
                let (x0, x1) = unsafe { (bcast4(xq[i].add(8 * p)), bcast4(xq[i].add(8 * p + 4))) };
                s32[i] = _mm512_dpbusd_epi32(s32[i], w0, x0);
                if N >= 4 {
                    s32[i] = _mm512_dpbusd_epi32(s32[i], w1, x1);
                } else {
                    t32[i] = _mm512_dpbusd_epi32(t32[i], w1, x1);
                }
            }
        }
        let (d, m) = (f16x16(&bl.d, &bh.d), f16x16(&bl.m, &bh.m));
        for i in 0..N {
            // SAFETY: as above.
            let (xd, xs_) = unsafe { (*xs[i].d.get_unchecked(b), *xs[i].s.get_unchecked(b)) };
            let scale = _mm512_mul_ps(d, _mm512_set1_ps(xd));
            let sums = if N >= 4 {
                s32[i]
            } else {
                _mm512_add_epi32(s32[i], t32[i])
            };
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[i]);
            offsets[i] = _mm512_fmadd_ps(m, _mm512_set1_ps(xs_), offsets[i]);
        }
    }
    let mut out = [[0f32; 16]; N];
    for i in 0..N {
        // SAFETY: 16 writable f32.
        unsafe { _mm512_storeu_ps(out[i].as_mut_ptr(), _mm512_add_ps(acc[i], offsets[i])) };
    }
    out
}

/// [`q4_1x16_dot`] for Q8_0 weights (`w = d·q`): the signed weights are shifted to
/// `w + 128` (u8) for `vpdpbusd`, and `128 · Σx` is taken off each block sum, as in
/// [`crate::kernels::matmul::q4_1_q8_0_avx2::q8_0x8_dot_vnni`].
///
/// # Safety
/// As [`q4_1x16_dot`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn q8_0x16_dot<const N: usize>(
    w: PairBlocks<'_, Q8_0x8>,
    xs: [&Q8_1Vector; N],
) -> [[f32; 16]; N] {
    let flip = _mm512_set1_epi8(-128);
    let mut acc = [_mm512_setzero_ps(); N];
    // Two inputs or more: prefetch in either layout (see PairBlocks::prefetch).
    let (next, prefetch) = (w.end(), w.prefetch() || N >= 2);
    for b in 0..w.len() {
        let (bl, bh) = w.get(b);
        if prefetch {
            prefetch_next(next, 2 * std::mem::size_of::<Q8_0x8>(), b);
        }
        // SAFETY: b < w.len() <= every input's block count (caller's contract).
        let xq: [*const i8; N] =
            std::array::from_fn(|i| unsafe { xs[i].qs.get_unchecked(b).as_ptr() });
        let mut s32 = [_mm512_setzero_si512(); N];
        let mut t32 = [_mm512_setzero_si512(); N];
        for c in (0..8).step_by(2) {
            // w + 128 as u8.
            let u0 = _mm512_xor_si512(
                pair(
                    bl.qs[c].as_ptr() as *const u8,
                    bh.qs[c].as_ptr() as *const u8,
                ),
                flip,
            );
            let u1 = _mm512_xor_si512(
                pair(
                    bl.qs[c + 1].as_ptr() as *const u8,
                    bh.qs[c + 1].as_ptr() as *const u8,
                ),
                flip,
            );
            for i in 0..N {
                // SAFETY: elements 4c .. 4c + 8 of a 32-value block.
                let (x0, x1) = unsafe { (bcast4(xq[i].add(4 * c)), bcast4(xq[i].add(4 * c + 4))) };
                s32[i] = _mm512_dpbusd_epi32(s32[i], u0, x0);
                if N >= 4 {
                    s32[i] = _mm512_dpbusd_epi32(s32[i], u1, x1);
                } else {
                    t32[i] = _mm512_dpbusd_epi32(t32[i], u1, x1);
                }
            }
        }
        let d = f16x16(&bl.d, &bh.d);
        for i in 0..N {
            // SAFETY: as above.
            let (xd, qsum) = unsafe { (*xs[i].d.get_unchecked(b), *xs[i].qsum.get_unchecked(b)) };
            let total = if N >= 4 {
                s32[i]
            } else {
                _mm512_add_epi32(s32[i], t32[i])
            };
            let sums = _mm512_sub_epi32(total, _mm512_set1_epi32(128 * qsum));
            let scale = _mm512_mul_ps(d, _mm512_set1_ps(xd));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[i]);
        }
    }
    let mut out = [[0f32; 16]; N];
    for i in 0..N {
        // SAFETY: 16 writable f32.
        unsafe { _mm512_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
    }
    out
}
