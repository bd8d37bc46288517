//! Quantized matrix-vector products for the decode hot path: Q4_1 and Q8_0 weights
//! against activations quantized to 8 bits per block of 32.
//!
//! candle 0.11 computes Q4_1 dot products with scalar code only, and runs its quantized
//! matmuls on a second thread pool beside rayon's; these kernels use AVX2 (runtime-detected,
//! scalar fallback) on rayon's pool alone.
//!
//! Formats (ggml, ggml-common.h): a Q4_1 block holds 32 weights as `w[j] = d · q[j] + m`,
//! with `d`, `m` f16 and `q[j]` 4-bit: byte `j` of `qs` holds element `j` in its low nibble
//! and element `j + 16` in its high nibble (20 bytes / 32 weights). A Q8_0 block holds
//! `w[j] = d · q[j]`, `d` f16 and `q[j]` i8 (34 bytes / 32 weights). Activations are
//! quantized per block of 32 as Q8_1: `x[j] ≈ d · q[j]`, `d = max|x| / 127`,
//! `q[j] = round(x[j] / d)`, plus `s = d · Σ q[j]`, so that
//! `Σ w·x ≈ d_w · d_x · Σ q_w q_x + m_w · s_x` (m = 0 for Q8_0).
use super::q8_1::Q8_1Vector;
use anyhow::{bail, Result};
use half::f16;
use rayon::prelude::*;

/// Values per block.
pub const QK: usize = 32;
/// Bytes of one Q4_1 block: d (f16), m (f16), 16 bytes of nibbles.
pub const Q4_1_BLOCK_BYTES: usize = 20;

/// Bytes of one Q8_0 block: d (f16), 32 signed bytes.
pub const Q8_0_BLOCK_BYTES: usize = 34;

/// A quantized weight matrix `[rows, cols]`, one row = `cols / 32` blocks, unpacked so the
/// hot loop needs no f16 conversion.
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    rows: usize,
    cols: usize,
    /// Per block: d (scale).
    d: Vec<f32>,
    /// Per block: m (offset; empty for Q8_0).
    m: Vec<f32>,
    /// Q4_1: per block 16 bytes of nibbles, ggml order.
    qs: Vec<[u8; 16]>,
    /// Q8_0: per block 32 signed values.
    q8: Vec<[i8; 32]>,
}

/// Rows handed to one thread at a time.
const ROWS_PER_TASK: usize = 64;

/// Which implementation of the block dot product this CPU runs.
#[derive(Debug, Clone, Copy)]
enum Kernel {
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Scalar,
}

impl Kernel {
    fn detect() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Kernel::Avx2;
            }
        }
        Kernel::Scalar
    }
}

impl QuantMatrix {
    /// Parse raw ggml Q4_1 bytes of a `[rows, cols]` tensor.
    /// Errors: `cols` not a multiple of 32, or a byte count that does not match.
    pub fn from_ggml_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        if cols % QK != 0 {
            bail!("Q4_1 rows of {cols} values are not whole blocks of {QK}");
        }
        let blocks = rows * cols / QK;
        if bytes.len() != blocks * Q4_1_BLOCK_BYTES {
            bail!(
                "Q4_1 tensor [{rows}, {cols}] needs {} bytes, got {}",
                blocks * Q4_1_BLOCK_BYTES,
                bytes.len()
            );
        }
        let mut d = Vec::with_capacity(blocks);
        let mut m = Vec::with_capacity(blocks);
        let mut qs = Vec::with_capacity(blocks);
        for b in bytes.chunks_exact(Q4_1_BLOCK_BYTES) {
            d.push(f16::from_le_bytes([b[0], b[1]]).to_f32());
            m.push(f16::from_le_bytes([b[2], b[3]]).to_f32());
            let mut q = [0u8; 16];
            q.copy_from_slice(&b[4..20]);
            qs.push(q);
        }
        Ok(QuantMatrix {
            rows,
            cols,
            d,
            m,
            qs,
            q8: Vec::new(),
        })
    }

    /// Parse raw ggml Q8_0 bytes of a `[rows, cols]` tensor.
    /// Errors: `cols` not a multiple of 32, or a byte count that does not match.
    pub fn from_ggml_q8_0_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        if cols % QK != 0 {
            bail!("Q8_0 rows of {cols} values are not whole blocks of {QK}");
        }
        let blocks = rows * cols / QK;
        if bytes.len() != blocks * Q8_0_BLOCK_BYTES {
            bail!(
                "Q8_0 tensor [{rows}, {cols}] needs {} bytes, got {}",
                blocks * Q8_0_BLOCK_BYTES,
                bytes.len()
            );
        }
        let mut d = Vec::with_capacity(blocks);
        let mut q8 = Vec::with_capacity(blocks);
        for b in bytes.chunks_exact(Q8_0_BLOCK_BYTES) {
            d.push(f16::from_le_bytes([b[0], b[1]]).to_f32());
            let mut q = [0i8; 32];
            for (o, &v) in q.iter_mut().zip(&b[2..]) {
                *o = v as i8;
            }
            q8.push(q);
        }
        Ok(QuantMatrix {
            rows,
            cols,
            d,
            m: Vec::new(),
            qs: Vec::new(),
            q8,
        })
    }

    fn is_q8_0(&self) -> bool {
        !self.q8.is_empty()
    }

    /// `[rows, cols]`.
    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// The weights as f32, row-major `[rows, cols]` (for tests and dense copies).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        if self.is_q8_0() {
            for (b, o) in out.chunks_exact_mut(QK).enumerate() {
                for j in 0..QK {
                    o[j] = self.q8[b][j] as f32 * self.d[b];
                }
            }
            return out;
        }
        for (b, o) in out.chunks_exact_mut(QK).enumerate() {
            for j in 0..16 {
                o[j] = (self.qs[b][j] & 0x0F) as f32 * self.d[b] + self.m[b];
                o[j + 16] = (self.qs[b][j] >> 4) as f32 * self.d[b] + self.m[b];
            }
        }
        out
    }

    /// `y = W · x` for each row of `xs` (`[n, cols]` row-major) → `[n, rows]` row-major.
    /// Each output element depends only on its weight row and its input row, computed the
    /// same way whatever `n` is. Errors: `xs.len()` not a multiple of `cols`.
    pub fn matmul(&self, xs: &[f32]) -> Result<Vec<f32>> {
        let mut out = matmul_group(&[self], xs)?;
        Ok(out.pop().unwrap_or_default())
    }

    #[inline]
    fn row_dot(&self, kernel: Kernel, first: usize, blocks: usize, x: &Q8_1Vector) -> f32 {
        match (kernel, self.is_q8_0()) {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: Kernel::detect chose this variant only when the CPU has the features;
            // first + blocks ≤ self.d.len() and x holds `blocks` blocks (callers' invariant).
            (Kernel::Avx2, false) => unsafe { self.row_dot_avx2(first, blocks, x) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            (Kernel::Avx2, true) => unsafe { self.row_dot_q8_0_avx2(first, blocks, x) },
            (_, false) => self.row_dot_scalar(first, blocks, x),
            (_, true) => self.row_dot_q8_0_scalar(first, blocks, x),
        }
    }

    fn row_dot_q8_0_scalar(&self, first: usize, blocks: usize, x: &Q8_1Vector) -> f32 {
        let mut sum = 0f32;
        for b in 0..blocks {
            let isum: i32 = self.q8[first + b]
                .iter()
                .zip(&x.qs[b])
                .map(|(&w, &v)| w as i32 * v as i32)
                .sum();
            sum += self.d[first + b] * x.d[b] * isum as f32;
        }
        sum
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn row_dot_q8_0_avx2(&self, first: usize, blocks: usize, x: &Q8_1Vector) -> f32 {
        use std::arch::x86_64::*;
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        for b in 0..blocks {
            let w = _mm256_loadu_si256(self.q8[first + b].as_ptr() as *const __m256i);
            let y = _mm256_loadu_si256(x.qs[b].as_ptr() as *const __m256i);
            // i8·i8 via u8·i8: |w| · (y with w's sign).
            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));
            let quads = _mm256_madd_epi16(pairs, ones);
            let scale = _mm256_set1_ps(self.d[first + b] * x.d[b]);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(quads), scale, acc);
        }
        hsum(acc)
    }

    fn row_dot_scalar(&self, first: usize, blocks: usize, x: &Q8_1Vector) -> f32 {
        let mut sum = 0f32;
        for b in 0..blocks {
            let (q, xq) = (&self.qs[first + b], &x.qs[b]);
            let mut isum = 0i32;
            for j in 0..16 {
                isum +=
                    (q[j] & 0x0F) as i32 * xq[j] as i32 + (q[j] >> 4) as i32 * xq[j + 16] as i32;
            }
            sum += self.d[first + b] * x.d[b] * isum as f32 + self.m[first + b] * x.s[b];
        }
        sum
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn row_dot_avx2(&self, first: usize, blocks: usize, x: &Q8_1Vector) -> f32 {
        use std::arch::x86_64::*;
        let low = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        let mut offsets = 0f32;
        for b in 0..blocks {
            let q = _mm_loadu_si128(self.qs[first + b].as_ptr() as *const __m128i);
            // [low nibbles (elements 0..16), high nibbles (16..32)] as unsigned bytes.
            let q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low);
            let y = _mm256_loadu_si256(x.qs[b].as_ptr() as *const __m256i);
            let pairs = _mm256_maddubs_epi16(q, y); // u8·i8 pairs → i16 (|.| ≤ 2·15·127)
            let quads = _mm256_madd_epi16(pairs, ones); // → i32 ×8
            let scale = _mm256_set1_ps(self.d[first + b] * x.d[b]);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(quads), scale, acc);
            offsets += self.m[first + b] * x.s[b];
        }
        hsum(acc) + offsets
    }
}

/// `W_i · x` for several matrices with the same `cols` (Q, K and V; gate and up) and each
/// row of `xs` (`[n, cols]`): quantizes `xs` once and runs every matrix in one parallel
/// region. Returns, per matrix, `[n, rows_i]` row-major. Every output element is computed by
/// the same code whatever the batch, so a row's result does not depend on `n`.
///
/// Errors: no matrix, matrices of different widths, `xs.len()` not a multiple of `cols`.
pub fn matmul_group(mats: &[&QuantMatrix], xs: &[f32]) -> Result<Vec<Vec<f32>>> {
    let Some(first) = mats.first() else {
        bail!("no matrix to multiply")
    };
    let cols = first.cols;
    if mats.iter().any(|m| m.cols != cols) {
        bail!("grouped matrices must have the same width");
    }
    if xs.len() % cols != 0 {
        bail!("input of {} values is not rows of {cols}", xs.len());
    }
    let n = xs.len() / cols;
    let qx: Vec<Q8_1Vector> = xs.chunks_exact(cols).map(Q8_1Vector::quantize).collect();
    let bpr = cols / QK;
    let kernel = Kernel::detect();
    let tasks: Vec<(usize, usize)> = mats
        .iter()
        .enumerate()
        .flat_map(|(i, m)| (0..m.rows).step_by(ROWS_PER_TASK).map(move |r0| (i, r0)))
        .collect();
    // Each task: rows r0.. of one matrix against every input vector, [rows, n] order, so a
    // weight row is read from memory once per call.
    let parts: Vec<Vec<f32>> = tasks
        .par_iter()
        .map(|&(i, r0)| {
            let m = mats[i];
            let r1 = (r0 + ROWS_PER_TASK).min(m.rows);
            let mut part = Vec::with_capacity((r1 - r0) * n);
            for r in r0..r1 {
                for x in &qx {
                    part.push(m.row_dot(kernel, r * bpr, bpr, x));
                }
            }
            part
        })
        .collect();
    let mut outs: Vec<Vec<f32>> = mats.iter().map(|m| vec![0f32; n * m.rows]).collect();
    for (&(i, r0), part) in tasks.iter().zip(&parts) {
        let rows = mats[i].rows;
        for (k, &y) in part.iter().enumerate() {
            let (r, v) = (r0 + k / n, k % n);
            outs[i][v * rows + r] = y;
        }
    }
    Ok(outs)
}

/// Sum of the 8 lanes of `acc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum(acc: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let hi = _mm256_extractf128_ps(acc, 1);
    let s = _mm_add_ps(_mm256_castps256_ps128(acc), hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_q4_1(rows: usize, cols: usize, seed: u32) -> Vec<u8> {
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_mul(1664525).wrapping_add(1013904223);
            (state >> 8) as u8
        };
        let mut bytes = Vec::new();
        for _ in 0..rows * cols / QK {
            bytes.extend(f16::from_f32(0.01 + next() as f32 / 5000.0).to_le_bytes());
            bytes.extend(f16::from_f32(-0.05 + next() as f32 / 10000.0).to_le_bytes());
            for _ in 0..16 {
                bytes.push(next());
            }
        }
        bytes
    }

    #[test]
    fn matches_dequantized_dot_within_activation_quantization_error() -> Result<()> {
        let (rows, cols) = (40, 96);
        let w = QuantMatrix::from_ggml_bytes(&random_q4_1(rows, cols, 7), rows, cols)?;
        let dense = w.dequantize();
        let xs: Vec<f32> = (0..2 * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let got = w.matmul(&xs)?;
        for v in 0..2 {
            let x = &xs[v * cols..(v + 1) * cols];
            let xq = Q8_1Vector::quantize(x);
            for r in 0..rows {
                // Exact reference on the quantized activations: Σ w · (d · q).
                let want: f32 = (0..cols)
                    .map(|c| dense[r * cols + c] * xq.d[c / QK] * xq.qs[c / QK][c % QK] as f32)
                    .sum();
                let y = got[v * rows + r];
                assert!(
                    (y - want).abs() < 1e-3 * (1.0 + want.abs()),
                    "row {r}: {y} vs {want}"
                );
                let scalar = w.row_dot_scalar(r * cols / QK, cols / QK, &xq);
                assert!(
                    (scalar - y).abs() < 1e-4 * (1.0 + y.abs()),
                    "scalar {scalar} vs simd {y}"
                );
            }
        }
        Ok(())
    }

    #[test]
    fn a_row_does_not_depend_on_the_batch() -> Result<()> {
        let (rows, cols) = (70, 64);
        let w = QuantMatrix::from_ggml_bytes(&random_q4_1(rows, cols, 3), rows, cols)?;
        let xs: Vec<f32> = (0..3 * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let all = w.matmul(&xs)?;
        let one = w.matmul(&xs[2 * cols..])?;
        assert_eq!(&all[2 * rows..], &one[..]);
        Ok(())
    }

    #[test]
    fn q8_0_matches_its_dequantized_dot() -> Result<()> {
        let (rows, cols) = (24, 64);
        let bytes: Vec<u8> = (0..rows * cols / QK)
            .flat_map(|b| {
                let mut blk = f16::from_f32(0.01 + b as f32 * 1e-4).to_le_bytes().to_vec();
                blk.extend((0..32).map(|j| ((b * 31 + j * 17) % 255) as u8));
                blk
            })
            .collect();
        let w = QuantMatrix::from_ggml_q8_0_bytes(&bytes, rows, cols)?;
        let dense = w.dequantize();
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.7).cos()).collect();
        let xq = Q8_1Vector::quantize(&x);
        let got = w.matmul(&x)?;
        for r in 0..rows {
            let want: f32 = (0..cols)
                .map(|c| dense[r * cols + c] * xq.d[c / QK] * xq.qs[c / QK][c % QK] as f32)
                .sum();
            assert!(
                (got[r] - want).abs() < 1e-4 * (1.0 + want.abs()),
                "row {r}: {} vs {want}",
                got[r]
            );
            let scalar = w.row_dot_q8_0_scalar(r * cols / QK, cols / QK, &xq);
            assert!((scalar - got[r]).abs() < 1e-4 * (1.0 + want.abs()));
        }
        Ok(())
    }

    #[test]
    fn rejects_bad_sizes() {
        assert!(QuantMatrix::from_ggml_bytes(&[0u8; 20], 1, 30).is_err());
        assert!(QuantMatrix::from_ggml_bytes(&[0u8; 19], 1, 32).is_err());
    }
}
