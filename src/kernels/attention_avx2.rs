//! AVX2 + FMA kernel for one query row of causal attention (see `model::attention`).
//!
//! For one query row `q` (`head_dim` values, already scaled by 1/√head_dim) and the keys
//! and values `0 .. len` of its KV head: scores `s_j = q·k_j`, `p_j = exp(s_j − max s)`,
//! output `Σ p_j v_j / Σ p_j` (softmax(QKᵀ)V, Vaswani et al. 2017).
//!
//! Every key's dot product is one FMA chain over the eight-lane chunks of head_dim, in
//! order, then a fixed lane fold; keys are taken eight at a time only to run eight chains
//! side by side. The result for a query row therefore depends on its position alone, never
//! on how many rows are computed together: naive and KV-cached decode stay bit-identical.
#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

/// Lane k of the result = sum of the eight lanes of `s[k]`, always folded in the same order.
#[inline]
#[target_feature(enable = "avx2")]
fn fold8(s: [__m256; 8]) -> __m256 {
    let h01 = _mm256_hadd_ps(s[0], s[1]);
    let h23 = _mm256_hadd_ps(s[2], s[3]);
    let h45 = _mm256_hadd_ps(s[4], s[5]);
    let h67 = _mm256_hadd_ps(s[6], s[7]);
    let h0123 = _mm256_hadd_ps(h01, h23);
    let h4567 = _mm256_hadd_ps(h45, h67);
    let lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
    let hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
    _mm256_add_ps(lo, hi)
}

/// `exp(x)` per lane for `x ≤ 0` (softmax inputs after subtracting the max), with the
/// Cephes single-precision method: `x = n·ln2 + r`, a degree-6 polynomial for `exp(r)` on
/// |r| ≤ ln2/2, times `2^n`; relative error about 2e-7. Inputs below −87.3 give ~0.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp_neg(x: __m256) -> __m256 {
    let x = _mm256_max_ps(x, _mm256_set1_ps(-87.3));
    let n = _mm256_round_ps(
        _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    // r = x − n·ln2, with ln2 split in two for precision.
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let r2 = _mm256_mul_ps(r, r);
    let y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
    // 2^n through the exponent bits (n ≥ −126 here, so the result is a normal number).
    let pow2 = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
        23,
    );
    _mm256_mul_ps(y, _mm256_castsi256_ps(pow2))
}

/// One query row of attention: `out = softmax(q·Kᵀ) V` over keys `0 .. len`.
///
/// `q`: `[8·NC]`; `k`, `v`: rows of `8·NC` values, key j at `j · 8·NC`, at least `len` rows;
/// `scores`: scratch, resized here; `out`: `[8·NC]`.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `len ≥ 1`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn attend_row<const NC: usize>(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    len: usize,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let d = 8 * NC;
    assert!(q.len() >= d && out.len() >= d && k.len() >= len * d && v.len() >= len * d);
    let padded = len.div_ceil(8) * 8;
    scores.clear();
    scores.resize(padded, 0.0);
    // SAFETY (all loads and stores below): indices are bounded by the asserts above —
    // key rows j < len, chunks c < NC, score indices < padded.
    let load = |s: &[f32], at: usize| unsafe { _mm256_loadu_ps(s.as_ptr().add(at)) };
    let mut j = 0;
    while j < len {
        let keys = (len - j).min(8);
        let mut acc = [_mm256_setzero_ps(); 8];
        for c in 0..NC {
            let qc = load(q, 8 * c);
            for (t, a) in acc.iter_mut().enumerate().take(keys) {
                *a = _mm256_fmadd_ps(qc, load(k, (j + t) * d + 8 * c), *a);
            }
        }
        let sums = fold8(acc);
        let mut lanes = [0f32; 8];
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sums) };
        scores[j..j + keys].copy_from_slice(&lanes[..keys]);
        j += keys;
    }
    let max = scores[..len]
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    for chunk in scores.chunks_exact_mut(8) {
        let e = exp_neg(_mm256_sub_ps(load(chunk, 0), _mm256_set1_ps(max)));
        unsafe { _mm256_storeu_ps(chunk.as_mut_ptr(), e) };
    }
    // Padding lanes are not keys.
    for s in &mut scores[len..] {
        *s = 0.0;
    }
    let mut total = _mm256_setzero_ps();
    for chunk in scores.chunks_exact(8) {
        total = _mm256_add_ps(total, load(chunk, 0));
    }
    let zero = _mm256_setzero_ps();
    let sum = _mm256_cvtss_f32(fold8([total, zero, zero, zero, zero, zero, zero, zero]));
    let mut acc = [_mm256_setzero_ps(); NC];
    for (jj, &p) in scores[..len].iter().enumerate() {
        let p = _mm256_set1_ps(p);
        for (c, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(p, load(v, jj * d + 8 * c), *a);
        }
    }
    let inv = _mm256_set1_ps(1.0 / sum);
    for (c, a) in acc.iter().enumerate() {
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * c), _mm256_mul_ps(*a, inv)) };
    }
}
