//! Unquantized GGUF matrices (F16, BF16, F32) as a [`QuantMatrix`]: repacked at load into
//! eight-row block columns ([`crate::kernels::matmul::float`]) in the file's own precision, and
//! multiplied against f32 activations (no 8-bit quantization of the inputs: ggml converts
//! them to the weight's type instead, F16 or BF16, which only loses precision) by the AVX2
//! kernels of [`crate::kernels::matmul::float_avx2`] or their portable twins, bit for bit the same.
use super::load::pack;
use super::split::scatter;
use super::{Kernel, Packed, QuantMatrix};
use crate::kernels::matmul::float::{self, F32_BLOCK_BYTES, H16_BLOCK_BYTES};
use crate::kernels::matmul::q4_1_q8_0::ROWS;
use anyhow::{bail, Result};

impl QuantMatrix {
    /// Raw little-endian IEEE binary16 values of a `[rows, cols]` GGUF F16 tensor.
    /// Errors: `cols` not a multiple of 32, a byte count that does not match, or a value
    /// that is an infinity or NaN (a damaged file), named by row and column.
    pub fn from_ggml_f16_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        let blocks = h16_blocks("F16", bytes, (rows, cols), false)?;
        Ok(Self::own_layout(rows, cols, Packed::F16(blocks)))
    }

    /// Raw little-endian bfloat16 values of a `[rows, cols]` GGUF BF16 tensor (errors as
    /// [`Self::from_ggml_f16_bytes`]).
    pub fn from_ggml_bf16_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        let blocks = h16_blocks("BF16", bytes, (rows, cols), true)?;
        Ok(Self::own_layout(rows, cols, Packed::BF16(blocks)))
    }

    /// Raw little-endian f32 values of a `[rows, cols]` GGUF F32 tensor (errors as
    /// [`Self::from_ggml_f16_bytes`]).
    pub fn from_ggml_f32_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        let bad = bytes
            .chunks_exact(4)
            .position(|v| !f32::from_le_bytes([v[0], v[1], v[2], v[3]]).is_finite());
        if let Some(i) = bad {
            bail!("F32 {}: the file is damaged", non_finite_at(i, cols));
        }
        let blocks = pack(
            "F32",
            bytes,
            F32_BLOCK_BYTES,
            (rows, cols),
            float::fill_f32,
            false,
        )?;
        Ok(Self::own_layout(rows, cols, Packed::F32(blocks)))
    }

    /// Whether the weights are unquantized (F16, BF16, F32): their kernels take f32 inputs
    /// ([`Self::float_group_dot_many`]), not 8-bit ones.
    pub(super) fn is_float(&self) -> bool {
        matches!(
            self.packed,
            Packed::F16(_) | Packed::BF16(_) | Packed::F32(_)
        )
    }

    /// The eight results of group `g` against every input row `v` of `xs` (`[n, cols]`),
    /// handed to `out(v, results)`, up to four inputs per kernel call (the weights widened
    /// once for them all; each input's arithmetic is the same in any grouping). Panics for
    /// a quantized matrix or `xs` not rows of `cols`.
    pub(super) fn float_group_dot_many(
        &self,
        kernel: Kernel,
        g: usize,
        xs: &[f32],
        out: &mut impl FnMut(usize, &[f32]),
    ) {
        assert!(
            self.cols > 0 && xs.len().is_multiple_of(self.cols),
            "inputs are not rows of {}",
            self.cols
        );
        let n = xs.len() / self.cols;
        let row = |v: usize| &xs[v * self.cols..(v + 1) * self.cols];
        let range = self.group_range(g);
        let mut put = |v0: usize, ys: &[[f32; ROWS]]| scatter(out, v0, ys);
        let vector = !matches!(kernel, Kernel::Scalar);
        let mut v0 = 0;
        while v0 < n {
            #[cfg(target_arch = "x86_64")]
            macro_rules! run {
                ($avx2:path, $blocks:expr) => {{
                    let b = &$blocks[range.clone()];
                    let take = (n - v0).min(4);
                    // SAFETY: every Kernel but Scalar was chosen on a CPU with AVX2, FMA and
                    // F16C (Kernel::detect); each input row holds `cols` = 32 · b.len() values.
                    unsafe {
                        match take {
                            4 => put(
                                v0,
                                &$avx2(b, [row(v0), row(v0 + 1), row(v0 + 2), row(v0 + 3)]),
                            ),
                            3 => put(v0, &$avx2(b, [row(v0), row(v0 + 1), row(v0 + 2)])),
                            2 => put(v0, &$avx2(b, [row(v0), row(v0 + 1)])),
                            _ => put(v0, &$avx2(b, [row(v0)])),
                        }
                    }
                    take
                }};
            }
            v0 += match &self.packed {
                #[cfg(target_arch = "x86_64")]
                Packed::F16(b) if vector => run!(crate::kernels::matmul::float_avx2::f16x8_dot, b),
                #[cfg(target_arch = "x86_64")]
                Packed::BF16(b) if vector => {
                    run!(crate::kernels::matmul::float_avx2::bf16x8_dot, b)
                }
                #[cfg(target_arch = "x86_64")]
                Packed::F32(b) if vector => run!(crate::kernels::matmul::float_avx2::f32x8_dot, b),
                Packed::F16(b) => {
                    let y = float::h16x8_dot(&b[range.clone()], float::f16_to_f32, row(v0));
                    put(v0, &[y]);
                    1
                }
                Packed::BF16(b) => {
                    let y = float::h16x8_dot(&b[range.clone()], float::bf16_to_f32, row(v0));
                    put(v0, &[y]);
                    1
                }
                Packed::F32(b) => {
                    put(v0, &[float::f32x8_dot(&b[range.clone()], row(v0))]);
                    1
                }
                _ => panic!("float_group_dot_many on a quantized matrix"),
            };
        }
    }
}

impl QuantMatrix {
    /// Group `g` against `x` on the portable kernel (the tests' check of the vector ones).
    #[cfg(test)]
    fn float_group_dot_portable(&self, g: usize, x: &[f32]) -> [f32; ROWS] {
        let mut out = [0f32; ROWS];
        self.float_group_dot_many(Kernel::Scalar, g, x, &mut |_, y: &[f32]| {
            out.copy_from_slice(y)
        });
        out
    }
}

/// The block columns of a `[rows, cols]` tensor of 16-bit floats (`bf16`: BF16, else F16),
/// checked finite. Errors: as [`QuantMatrix::from_ggml_f16_bytes`].
fn h16_blocks(
    format: &str,
    bytes: &[u8],
    (rows, cols): (usize, usize),
    bf16: bool,
) -> Result<Vec<float::H16x8>> {
    check_finite_h16(format, bytes, cols, bf16)?;
    pack(
        format,
        bytes,
        H16_BLOCK_BYTES,
        (rows, cols),
        float::fill_h16,
        false,
    )
}

/// `cols`-wide rows of 16-bit floats in `bytes` hold no infinity or NaN. Errors name the
/// type, the row and the column.
fn check_finite_h16(format: &str, bytes: &[u8], cols: usize, bf16: bool) -> Result<()> {
    match float::first_non_finite_h16(bytes, bf16) {
        Some(i) => bail!("{format} {}: the file is damaged", non_finite_at(i, cols)),
        None => Ok(()),
    }
}

/// "row R, column C holds a value that is not a finite number" for value `i` of rows of `cols`.
fn non_finite_at(i: usize, cols: usize) -> String {
    format!(
        "row {}, column {} holds a value that is not a finite number",
        i / cols.max(1),
        i % cols.max(1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// `rows · cols` values in about ±2, from `seed`.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
            })
            .collect()
    }

    /// The three float types' matrices of the same values (rounded to the type), `[rows,
    /// cols]`, with the values each holds.
    fn matrices(rows: usize, cols: usize) -> Vec<(&'static str, QuantMatrix, Vec<f32>)> {
        let v = values(rows * cols, 5);
        let h: Vec<u8> = v
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect();
        let b: Vec<u8> = v
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
            .collect();
        let f: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        vec![
            (
                "F16",
                QuantMatrix::from_ggml_f16_bytes(&h, rows, cols).expect("f16"),
                v.iter().map(|&x| f16::from_f32(x).to_f32()).collect(),
            ),
            (
                "BF16",
                QuantMatrix::from_ggml_bf16_bytes(&b, rows, cols).expect("bf16"),
                v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect(),
            ),
            (
                "F32",
                QuantMatrix::from_ggml_f32_bytes(&f, rows, cols).expect("f32"),
                v,
            ),
        ]
    }

    /// Each float layout holds the file's values (exactly), multiplies like the f64 product
    /// within f32 rounding (2e-6 of the sum of |terms|: 96 terms of 2⁻²⁴ each at most), gives
    /// a row the same bits alone as in a batch of 1–9, and the portable kernel's bits.
    #[test]
    fn float_matrices_multiply_like_the_f64_product_in_any_batch() {
        // 13 rows: a partial last group; 96 columns: three block columns.
        let (rows, cols) = (13, 96);
        for (name, m, w) in matrices(rows, cols) {
            assert_eq!(m.dequantize(), w, "{name}: held values");
            assert_eq!(
                m.bytes() as usize,
                16 * cols * if name == "F32" { 4 } else { 2 }
            );
            let xs = values(9 * cols, 11);
            let all = m.matmul(&xs).expect("matmul");
            for v in 0..9 {
                let x = &xs[v * cols..(v + 1) * cols];
                let alone = m.matmul(x).expect("alone");
                assert_eq!(
                    alone,
                    all[v * rows..(v + 1) * rows],
                    "{name}: input {v} alone"
                );
                for r in 0..rows {
                    let terms = (0..cols).map(|c| w[r * cols + c] as f64 * x[c] as f64);
                    let (exact, size) = terms.fold((0f64, 0f64), |(s, a), t| (s + t, a + t.abs()));
                    let got = alone[r] as f64;
                    assert!(
                        (got - exact).abs() <= 2e-6 * size,
                        "{name} row {r}: {got} vs {exact}"
                    );
                    let portable = m.float_group_dot_portable(r / ROWS, x)[r % ROWS];
                    assert_eq!(
                        portable.to_bits(),
                        alone[r].to_bits(),
                        "{name} row {r}: portable"
                    );
                }
            }
        }
    }

    /// Infinities and NaNs are refused at load, naming the row and column; so are rows that
    /// are not whole blocks of 32 and byte counts that do not match.
    #[test]
    fn damaged_float_tensors_are_refused() {
        let mut h = vec![0u8; 2 * 2 * 64];
        h[2 * (64 + 5)..2 * (64 + 5) + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
        let e = QuantMatrix::from_ggml_f16_bytes(&h, 2, 64).expect_err("inf");
        assert!(e.to_string().contains("row 1, column 5"), "{e}");
        let mut f = vec![0u8; 4 * 64];
        f[4 * 3..4 * 4].copy_from_slice(&f32::NAN.to_le_bytes());
        let e = QuantMatrix::from_ggml_f32_bytes(&f, 1, 64).expect_err("nan");
        assert!(e.to_string().contains("row 0, column 3"), "{e}");
        let e = QuantMatrix::from_ggml_bf16_bytes(&[0u8; 2 * 40], 1, 40).expect_err("40 wide");
        assert!(e.to_string().contains("not whole blocks of 32"), "{e}");
        let e = QuantMatrix::from_ggml_f16_bytes(&[0u8; 100], 1, 64).expect_err("short");
        assert!(e.to_string().contains("needs 128 bytes, got 100"), "{e}");
    }
}
