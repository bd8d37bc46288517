//! Activations quantized to Q8_1 for the quantized matrix-vector kernels ([`crate::kernels::matmul`]).
//!
//! ggml's `quantize_row_q8_1` (ggml-quants.c): per block of 32 values, `d = max|x| / 127`,
//! `q[j] = round(x[j] / d)` as i8, and `s = d · Σ q[j]` (used by Q4_1's offset term).

/// Values per block.
pub const QK: usize = 32;

/// Activations quantized to Q8_1: per block a scale, `d · Σ q`, and 32 signed bytes.
#[derive(Debug, Clone, Default)]
pub struct Q8_1Vector {
    /// Per block: scale.
    pub(crate) d: Vec<f32>,
    /// Per block: `d · Σ q`.
    pub(crate) s: Vec<f32>,
    /// Per block: `d · Σ q` over elements 0..16 and over 16..32 (the offsets of weights
    /// scaled per half block, [`crate::kernels::matmul::q2_k_q3_k`]).
    pub(crate) s_half: Vec<[f32; 2]>,
    /// Per block: `Σ q` over elements 0..16 and over 16..32 (Q6_K's code bias).
    pub(crate) qsum_half: Vec<[i32; 2]>,
    /// Per block: `Σ q` (the VNNI Q8_0 kernel's offset correction).
    pub(crate) qsum: Vec<i32>,
    pub(crate) qs: Vec<[i8; 32]>,
}

impl Q8_1Vector {
    /// Quantize `x` (length a multiple of 32) per block of 32, as ggml's `quantize_row_q8_1`
    /// (rounding half away from zero, as `f32::round`). AVX2 when the CPU has it: the same
    /// bits as the scalar code (same max, same products, exact rounding), about 8× faster.
    pub fn quantize(x: &[f32]) -> Q8_1Vector {
        let blocks = x.len() / QK;
        let mut v = Q8_1Vector {
            d: Vec::with_capacity(blocks),
            s: Vec::with_capacity(blocks),
            s_half: Vec::with_capacity(blocks),
            qsum_half: Vec::with_capacity(blocks),
            qsum: Vec::with_capacity(blocks),
            qs: Vec::with_capacity(blocks),
        };
        #[cfg(target_arch = "x86_64")]
        let simd = std::is_x86_feature_detected!("avx2") && !crate::cpu::portable_forced();
        for block in x.chunks_exact(QK) {
            #[cfg(target_arch = "x86_64")]
            let amax = if simd {
                // SAFETY: AVX2 was detected; `block` holds 32 values.
                let m = unsafe { abs_max_avx2(block) };
                // ∞, or a NaN that `vmaxps` passed on: the scalar fold (which skips NaN).
                if m.is_finite() {
                    m
                } else {
                    abs_max(block)
                }
            } else {
                abs_max(block)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let amax = abs_max(block);
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut q = [0i8; 32];
            #[cfg(target_arch = "x86_64")]
            let sum = if simd && amax.is_finite() {
                // SAFETY: AVX2 was detected; `block` holds 32 values.
                unsafe { quantize_block_avx2(block, id, &mut q) }
            } else {
                quantize_block(block, id, &mut q)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let sum = quantize_block(block, id, &mut q);
            v.d.push(d);
            v.s.push(d * sum as f32);
            let lo: i32 = q[..16].iter().map(|&c| c as i32).sum();
            v.s_half.push([d * lo as f32, d * (sum - lo) as f32]);
            v.qsum_half.push([lo, sum - lo]);
            v.qsum.push(sum);
            v.qs.push(q);
        }
        v
    }
}

/// `max |x[j]|` of a block (`f32::max`, so NaN values are skipped).
fn abs_max(block: &[f32]) -> f32 {
    block.iter().fold(0f32, |a, &b| a.max(b.abs()))
}

/// [`abs_max`] of 32 values with AVX2: whenever the result is finite it is [`abs_max`]'s
/// value (a maximum is exact in any order, `|−0| = +0` either way, and `vmaxps` either
/// returns a NaN operand or drops it, as the fold skips it); ∞ in the block gives ∞, and a
/// NaN may give NaN, for which the caller takes the fold.
///
/// # Safety
/// The CPU must support AVX2; `block` holds 32 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn abs_max_avx2(block: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    assert!(block.len() >= QK);
    let sign = _mm256_set1_ps(-0.0);
    // SAFETY: 32 readable f32 (asserted).
    let load =
        |k: usize| unsafe { _mm256_andnot_ps(sign, _mm256_loadu_ps(block.as_ptr().add(8 * k))) };
    let m = _mm256_max_ps(
        _mm256_max_ps(load(0), load(1)),
        _mm256_max_ps(load(2), load(3)),
    );
    let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let m1 = _mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2));
    _mm_cvtss_f32(m1)
}

/// `q[j] = round(x[j] · id)`; returns `Σ q`.
fn quantize_block(block: &[f32], id: f32, q: &mut [i8; 32]) -> i32 {
    let mut sum = 0i32;
    for (o, &xv) in q.iter_mut().zip(block) {
        *o = (xv * id).round() as i8;
        sum += *o as i32;
    }
    sum
}

/// [`quantize_block`] with AVX2: `round` as `t + (|v − t| ≥ 0.5 ? sign(v) : 0)` with
/// `t = trunc(v)` (exact: `|v| ≤ 127`, so `v − t` has no rounding error), which is
/// `f32::round`'s half-away-from-zero for every finite `v`.
///
/// # Safety
/// The CPU must support AVX2; `block` must hold 32 finite values (the caller checks the
/// block's maximum).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_block_avx2(block: &[f32], id: f32, q: &mut [i8; 32]) -> i32 {
    use std::arch::x86_64::*;
    let idv = _mm256_set1_ps(id);
    let half = _mm256_set1_ps(0.5);
    let sign_mask = _mm256_set1_ps(-0.0);
    let one = _mm256_set1_ps(1.0);
    let mut ints = [_mm256_setzero_si256(); 4];
    for (k, out) in ints.iter_mut().enumerate() {
        // SAFETY: 8 readable f32 at 8k (the block holds 32).
        let x = unsafe { _mm256_loadu_ps(block.as_ptr().add(8 * k)) };
        let v = _mm256_mul_ps(x, idv);
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
        let frac = _mm256_andnot_ps(sign_mask, _mm256_sub_ps(v, t));
        let away = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, half);
        let step = _mm256_and_ps(away, _mm256_or_ps(one, _mm256_and_ps(v, sign_mask)));
        *out = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
    }
    let s = _mm256_add_epi32(
        _mm256_add_epi32(ints[0], ints[1]),
        _mm256_add_epi32(ints[2], ints[3]),
    );
    let mut lanes = [0i32; 8];
    // SAFETY: 8 writable i32.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, s) };
    // i32 → i16 → i8 (values in −127..=127, no saturation), then undo the lane interleave.
    let a = _mm256_packs_epi32(ints[0], ints[1]);
    let b = _mm256_packs_epi32(ints[2], ints[3]);
    let bytes = _mm256_packs_epi16(a, b);
    let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: 32 writable bytes.
    unsafe { _mm256_storeu_si256(q.as_mut_ptr() as *mut __m256i, ordered) };
    lanes.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 block maximum equals the scalar fold on finite blocks (signed zeros, tiny
    /// and huge values, the maximum in every position); with NaN or ∞ in the block it is
    /// either the fold's value or not finite (then `quantize` takes the fold), so a whole
    /// quantized vector with such blocks has the fold's scales.
    #[test]
    fn simd_block_maximum_equals_the_scalar_fold() {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            let specials = [0.0, -0.0, 1e-45, -3e-39, 1.5, -2.25, 3e38, -3.4e38];
            for at in 0..32 {
                for &big in &specials {
                    let mut block: Vec<f32> = (0..32)
                        .map(|j| specials[j % specials.len()] * 1e-3)
                        .collect();
                    block[at] = big;
                    // SAFETY: AVX2 detected; 32 values.
                    let simd = unsafe { abs_max_avx2(&block) };
                    assert_eq!(simd.to_bits(), abs_max(&block).to_bits(), "at {at}, {big}");
                }
                for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                    let mut block = vec![0.5f32; 32];
                    block[at] = bad;
                    // SAFETY: as above.
                    let simd = unsafe { abs_max_avx2(&block) };
                    assert!(
                        !simd.is_finite() || simd.to_bits() == abs_max(&block).to_bits(),
                        "at {at}, {bad}: {simd}"
                    );
                    if bad.is_infinite() {
                        assert_eq!(simd, f32::INFINITY);
                    }
                }
            }
            // NaN and ∞ inside a vector: the same bytes as the scalar path's quantization.
            let mut x: Vec<f32> = (0..96).map(|i| (i as f32 - 40.0) * 0.37).collect();
            x[5] = f32::NAN;
            x[70] = f32::INFINITY;
            let v = Q8_1Vector::quantize(&x);
            for (b, block) in x.chunks_exact(QK).enumerate() {
                let amax = abs_max(block);
                assert_eq!(v.d[b].to_bits(), (amax / 127.0).to_bits(), "block {b}");
            }
        }
    }

    /// The AVX2 path gives the scalar path's bits, halves (x.5 after scaling) included.
    #[test]
    fn simd_rounding_equals_f32_round() {
        let mut state = 12345u32;
        let mut next = || {
            state = state.wrapping_mul(1664525).wrapping_add(1013904223);
            (state >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        for trial in 0..200 {
            let mut block: Vec<f32> = (0..32).map(|_| next() * 10.0).collect();
            if trial % 3 == 0 {
                // Values that land exactly on .5 after scaling by 127 / 127 = 1.
                block[0] = 127.0;
                for (j, v) in block.iter_mut().enumerate().skip(1) {
                    *v = (j as f32 - 16.0) + 0.5;
                }
            }
            let amax = block.iter().fold(0f32, |a, &b| a.max(b.abs()));
            let id = 127.0 / amax;
            let (mut a, mut b) = ([0i8; 32], [0i8; 32]);
            let sa = quantize_block(&block, id, &mut a);
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 detected; finite values.
                let sb = unsafe { quantize_block_avx2(&block, id, &mut b) };
                assert_eq!((a, sa), (b, sb), "trial {trial}");
            }
        }
    }
}
