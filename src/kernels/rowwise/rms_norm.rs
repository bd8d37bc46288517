//! One row of RMSNorm (Zhang & Sennrich 2019), `y = x / sqrt(mean(x²) + eps) · w`:
//! AVX2 + FMA where the CPU has them, plain loops otherwise.
//!
//! The vector path sums the squares in eight lanes (lane j takes values j, j + 8, ...),
//! folds the lanes in a fixed order, then adds a tail of fewer than eight values in order;
//! the scalar path takes the same steps (the same bits). Each is a fixed function of the row alone, so a row's
//! result does not depend on the batch. `v / m · g` is the same IEEE division and product
//! in both.

/// RMSNorm of `row` into `out` (`row`, `w`, `out` of the same length `d`):
/// `out[i] = row[i] / sqrt(Σ row² / d + eps) · w[i]`.
pub fn rms_norm_row(row: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::kernels::avx2_fma() {
            // SAFETY: AVX2 and FMA were just detected.
            return unsafe { rms_norm_row_avx2(row, w, eps, out) };
        }
    }
    rms_norm_row_portable(row, w, eps, out);
}

/// The portable path: the vector path's sum (eight lanes of fused multiply-adds, folded in
/// its order, then the tail in order), so the same bits: 8-bit activations downstream
/// re-round any last-bit difference (issue 56).
pub fn rms_norm_row_portable(row: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = row.len().min(w.len()).min(out.len());
    let body = d / 8 * 8;
    let mut lanes = [0f32; 8];
    for c in row[..body].chunks_exact(8) {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = v.mul_add(v, *l);
        }
    }
    let mut sum2 = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for &v in &row[body..d] {
        sum2 += v * v;
    }
    let m = (sum2 / w.len() as f32 + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(row).zip(w) {
        *o = v / m * g;
    }
}

/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rms_norm_row_avx2(row: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let d = row.len().min(w.len()).min(out.len());
    let body = d / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    for c in (0..body).step_by(8) {
        // SAFETY: c + 8 ≤ body ≤ row.len().
        let v = unsafe { _mm256_loadu_ps(row.as_ptr().add(c)) };
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    let mut lanes = [0f32; 8];
    // SAFETY: 8 writable f32.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
    let mut sum2 = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for &v in &row[body..d] {
        sum2 += v * v;
    }
    let m = (sum2 / w.len() as f32 + eps).sqrt();
    let mv = _mm256_set1_ps(m);
    for c in (0..body).step_by(8) {
        // SAFETY: c + 8 ≤ body ≤ the length of all three slices.
        unsafe {
            let v = _mm256_loadu_ps(row.as_ptr().add(c));
            let g = _mm256_loadu_ps(w.as_ptr().add(c));
            _mm256_storeu_ps(
                out.as_mut_ptr().add(c),
                _mm256_mul_ps(_mm256_div_ps(v, mv), g),
            );
        }
    }
    for i in body..d {
        out[i] = row[i] / m * w[i];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The portable path gives the vector path's bits, with and without a tail.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_portable_path_gives_the_vector_bits() {
        if !crate::kernels::avx2_fma() {
            return;
        }
        for d in [1usize, 7, 8, 64, 67, 576] {
            let row: Vec<f32> = (0..d).map(|i| (i as f32 * 0.77).sin() * 3.0).collect();
            let w: Vec<f32> = (0..d).map(|i| 0.5 + (i % 5) as f32 * 0.1).collect();
            let (mut a, mut b) = (vec![0f32; d], vec![0f32; d]);
            rms_norm_row(&row, &w, 1e-5, &mut a);
            rms_norm_row_portable(&row, &w, 1e-5, &mut b);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "d {d}");
        }
    }

    /// Against the f64 formula, for widths with and without a tail.
    #[test]
    fn matches_the_f64_formula() {
        for d in [1usize, 7, 8, 64, 67, 576] {
            let row: Vec<f32> = (0..d)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
                .collect();
            let w: Vec<f32> = (0..d).map(|i| 0.5 + (i % 5) as f32 * 0.3).collect();
            let mut out = vec![0f32; d];
            rms_norm_row(&row, &w, 1e-5, &mut out);
            let ms: f64 = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / d as f64;
            let m = (ms + 1e-5).sqrt();
            for i in 0..d {
                let want = row[i] as f64 / m * w[i] as f64;
                assert!(
                    (out[i] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "d {d} [{i}]"
                );
            }
        }
    }
}
