//! Rotary position embedding of one head's row (Su et al. 2021), in place: pair `(a, b)`
//! of frequency `j` becomes `((x_a·cos_j − x_b·sin_j)·s, (x_a·sin_j + x_b·cos_j)·s)`, with
//! pairs `(2j, 2j + 1)` (GGUF/Llama "interleaved") or `(j, j + d/2)` (HF halves).
//!
//! The AVX2 path does eight values at a time with the same separate multiplies, add and
//! subtract as the scalar loop (no FMA, and `x_a·sin + x_b·cos` summed in an order IEEE
//! addition does not care about), so both give the same bits.

/// Rotate `o` (`2 · cos.len()` values) by the angles whose `cos`/`sin` are given, times
/// `scale`.
pub fn rotate(o: &mut [f32], cos: &[f32], sin: &[f32], interleaved: bool, scale: f32) {
    let half = cos.len().min(sin.len());
    #[cfg(target_arch = "x86_64")]
    {
        if half.is_multiple_of(8) && o.len() >= 2 * half && crate::kernels::avx2_fma() {
            // SAFETY: AVX2 was just detected; o holds 2·half values, cos/sin half each.
            unsafe {
                if interleaved {
                    rotate_interleaved_avx2(&mut o[..2 * half], cos, sin, scale);
                } else {
                    rotate_halves_avx2(&mut o[..2 * half], cos, sin, scale);
                }
            }
            return;
        }
    }
    rotate_portable(o, cos, sin, interleaved, scale);
}

/// The scalar loop.
pub fn rotate_portable(o: &mut [f32], cos: &[f32], sin: &[f32], interleaved: bool, scale: f32) {
    let half = cos.len().min(sin.len());
    for j in 0..half {
        let (a, b) = if interleaved {
            (2 * j, 2 * j + 1)
        } else {
            (j, j + half)
        };
        // Rotated in place: each pair is read before it is written.
        let (x1, x2) = (o[a], o[b]);
        o[a] = (x1 * cos[j] - x2 * sin[j]) * scale;
        o[b] = (x1 * sin[j] + x2 * cos[j]) * scale;
    }
}

/// # Safety
/// AVX2; `o.len() == 2 · half`, `cos`/`sin` hold `half` values, `half` a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rotate_halves_avx2(o: &mut [f32], cos: &[f32], sin: &[f32], scale: f32) {
    use std::arch::x86_64::*;
    let half = o.len() / 2;
    let s = _mm256_set1_ps(scale);
    let p = o.as_mut_ptr();
    for j in (0..half).step_by(8) {
        // SAFETY: j + 8 ≤ half; the second half starts at half.
        unsafe {
            let (c, sn) = (
                _mm256_loadu_ps(cos.as_ptr().add(j)),
                _mm256_loadu_ps(sin.as_ptr().add(j)),
            );
            let x1 = _mm256_loadu_ps(p.add(j));
            let x2 = _mm256_loadu_ps(p.add(j + half));
            let a = _mm256_sub_ps(_mm256_mul_ps(x1, c), _mm256_mul_ps(x2, sn));
            let b = _mm256_add_ps(_mm256_mul_ps(x1, sn), _mm256_mul_ps(x2, c));
            _mm256_storeu_ps(p.add(j), _mm256_mul_ps(a, s));
            _mm256_storeu_ps(p.add(j + half), _mm256_mul_ps(b, s));
        }
    }
}

/// # Safety
/// As [`rotate_halves_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rotate_interleaved_avx2(o: &mut [f32], cos: &[f32], sin: &[f32], scale: f32) {
    use std::arch::x86_64::*;
    let s = _mm256_set1_ps(scale);
    // Lane pattern (c0, c0, c1, c1, c2, c2, c3, c3) from four values.
    let dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    // Even lanes take −sin, odd lanes +sin.
    let sign = _mm256_setr_ps(-0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0);
    let p = o.as_mut_ptr();
    for j in (0..cos.len()).step_by(4) {
        // SAFETY: 4 cos/sin values at j (cos.len() a multiple of 8) cover o[2j .. 2j + 8].
        unsafe {
            let c4 = _mm256_castps128_ps256(_mm_loadu_ps(cos.as_ptr().add(j)));
            let s4 = _mm256_castps128_ps256(_mm_loadu_ps(sin.as_ptr().add(j)));
            let c = _mm256_permutevar8x32_ps(c4, dup);
            let sn = _mm256_xor_ps(_mm256_permutevar8x32_ps(s4, dup), sign);
            let x = _mm256_loadu_ps(p.add(2 * j));
            // (x1, x0, x3, x2, ...): each pair swapped.
            let xs = _mm256_permute_ps::<0b10_11_00_01>(x);
            // Even: x_a·c + x_b·(−s) = x_a·c − x_b·s; odd: x_b·c + x_a·s.
            let y = _mm256_add_ps(_mm256_mul_ps(x, c), _mm256_mul_ps(xs, sn));
            _mm256_storeu_ps(p.add(2 * j), _mm256_mul_ps(y, s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector paths give the scalar loop's bits, both pair layouts, several scales.
    #[test]
    fn vector_equals_scalar_to_the_bit() {
        for half in [8usize, 16, 32, 64] {
            let cos: Vec<f32> = (0..half).map(|j| (j as f32 * 0.7 + 0.3).cos()).collect();
            let sin: Vec<f32> = (0..half).map(|j| (j as f32 * 0.7 + 0.3).sin()).collect();
            let x: Vec<f32> = (0..2 * half)
                .map(|i| ((i * 31 % 17) as f32 - 8.0) / 3.0)
                .collect();
            for interleaved in [false, true] {
                for scale in [1.0f32, 0.125, 0.3] {
                    let (mut a, mut b) = (x.clone(), x.clone());
                    rotate(&mut a, &cos, &sin, interleaved, scale);
                    rotate_portable(&mut b, &cos, &sin, interleaved, scale);
                    let (a, b): (Vec<u32>, Vec<u32>) = (
                        a.iter().map(|v| v.to_bits()).collect(),
                        b.iter().map(|v| v.to_bits()).collect(),
                    );
                    assert_eq!(
                        a, b,
                        "half {half}, interleaved {interleaved}, scale {scale}"
                    );
                }
            }
        }
    }
}
