//! AVX2 + FMA + F16C kernels over eight interleaved weight rows ([`super::packed`]).
//!
//! One block column at a time: the activation block is loaded once and multiplied by the
//! eight rows' blocks (`vpmaddubsw` u8·i8 → i16 pairs, `vpmaddwd` → eight i32), the eight
//! rows' partial sums are folded into one vector (lane r = row r) by three rounds of
//! `vphaddd`, and that vector is scaled by the eight rows' f16 scales at once. Compared with
//! one row at a time this shares the activation load and the scale arithmetic across eight
//! rows and keeps every accumulator in a register: about half the instructions per block.
//!
//! Summation order per row is fixed (blocks left to right, the same lane folding), so a
//! row's result never depends on how many rows or inputs a call handles.
//!
//! Every function here is `unsafe`: callers must have checked that the CPU has AVX2, FMA
//! and F16C ([`super::quant`] does, once per call), and that `x` holds at least as many
//! blocks as the weight slice.
#![cfg(target_arch = "x86_64")]

use super::packed::{Q4_1x8, Q8_0x8};
use super::q8_1::Q8_1Vector;
use std::arch::x86_64::*;

/// Lane r of the result = sum of the eight i32 lanes of `s[r]`.
#[inline]
#[target_feature(enable = "avx2")]
fn fold8(s: [__m256i; 8]) -> __m256i {
    let h01 = _mm256_hadd_epi32(s[0], s[1]);
    let h23 = _mm256_hadd_epi32(s[2], s[3]);
    let h45 = _mm256_hadd_epi32(s[4], s[5]);
    let h67 = _mm256_hadd_epi32(s[6], s[7]);
    // [r0 lo, r1 lo, r2 lo, r3 lo | r0 hi, r1 hi, r2 hi, r3 hi] (lo/hi: 128-bit halves).
    let h0123 = _mm256_hadd_epi32(h01, h23);
    let h4567 = _mm256_hadd_epi32(h45, h67);
    let lo = _mm256_permute2x128_si256(h0123, h4567, 0x20);
    let hi = _mm256_permute2x128_si256(h0123, h4567, 0x31);
    _mm256_add_epi32(lo, hi)
}

/// Distance of the software prefetch ahead of the block being read, in bytes.
const PREFETCH_BYTES: usize = 2048;

/// Ask for the cache lines `ahead` bytes past `blk` (the same stream, further on).
#[inline]
#[target_feature(enable = "avx2")]
fn prefetch<T>(blk: &T, ahead: usize) {
    let p = (blk as *const T as *const i8).wrapping_add(ahead);
    let size = std::mem::size_of::<T>();
    let mut off = 0;
    while off < size {
        // A prefetch never faults, whatever the address.
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off));
        off += 64;
    }
}

/// Eight f16 values (raw bits) as eight f32 lanes.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn f16x8(bits: &[u16; 8]) -> __m256 {
    // SAFETY: `bits` is 16 readable bytes; loadu has no alignment requirement.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(bits.as_ptr() as *const __m128i)) }
}

/// `W · x` for the eight rows whose block columns are `blocks` (Q4_1 weights,
/// `w = d·q + m`): returns the eight row results.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C, and `x` must hold at least `blocks.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4_1x8_dot(blocks: &[Q4_1x8], x: &Q8_1Vector) -> [f32; 8] {
    let low = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    let mut offsets = _mm256_setzero_ps();
    for (b, blk) in blocks.iter().enumerate() {
        // SAFETY: b < blocks.len() <= x's block count (caller's contract).
        let (xq, xd, xs) = unsafe {
            (
                x.qs.get_unchecked(b),
                *x.d.get_unchecked(b),
                *x.s.get_unchecked(b),
            )
        };
        // SAFETY: 32 readable bytes.
        let y = unsafe { _mm256_loadu_si256(xq.as_ptr() as *const __m256i) };
        prefetch(blk, PREFETCH_BYTES);
        let row = |r: usize| {
            // SAFETY: 16 readable bytes.
            let q = unsafe { _mm_loadu_si128(blk.qs[r].as_ptr() as *const __m128i) };
            // [low nibbles (elements 0..16), high nibbles (16..32)] as unsigned bytes.
            let q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low);
            _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), ones)
        };
        let sums = fold8([
            row(0),
            row(1),
            row(2),
            row(3),
            row(4),
            row(5),
            row(6),
            row(7),
        ]);
        let scale = _mm256_mul_ps(f16x8(&blk.d), _mm256_set1_ps(xd));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
        offsets = _mm256_fmadd_ps(f16x8(&blk.m), _mm256_set1_ps(xs), offsets);
    }
    let mut out = [0f32; 8];
    // SAFETY: 8 writable f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(acc, offsets)) };
    out
}

/// `W · x` for the eight rows whose block columns are `blocks` (Q8_0 weights, `w = d·q`).
///
/// # Safety
/// As [`q4_1x8_dot`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q8_0x8_dot(blocks: &[Q8_0x8], x: &Q8_1Vector) -> [f32; 8] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    for (b, blk) in blocks.iter().enumerate() {
        // SAFETY: b < blocks.len() <= x's block count (caller's contract).
        let (xq, xd) = unsafe { (x.qs.get_unchecked(b), *x.d.get_unchecked(b)) };
        // SAFETY: 32 readable bytes.
        let y = unsafe { _mm256_loadu_si256(xq.as_ptr() as *const __m256i) };
        prefetch(blk, PREFETCH_BYTES);
        let row = |r: usize| {
            // SAFETY: 32 readable bytes.
            let w = unsafe { _mm256_loadu_si256(blk.qs[r].as_ptr() as *const __m256i) };
            // i8·i8 as u8·i8: |w| · (y with w's sign); exact for w = -128 too (|w| as u8).
            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));
            _mm256_madd_epi16(pairs, ones)
        };
        let sums = fold8([
            row(0),
            row(1),
            row(2),
            row(3),
            row(4),
            row(5),
            row(6),
            row(7),
        ]);
        let scale = _mm256_mul_ps(f16x8(&blk.d), _mm256_set1_ps(xd));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
    }
    let mut out = [0f32; 8];
    // SAFETY: 8 writable f32.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
    out
}
