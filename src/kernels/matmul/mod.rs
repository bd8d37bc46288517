//! Quantized matrix-vector products for the decode hot path: Q4_1 and Q8_0 weights (and
//! Q4_0 and Q5_0, repacked exactly into those layouts at load: `quant_repack.rs`) against
//! activations quantized to 8 bits per block of 32.
//!
//! candle 0.11 computes Q4_1 dot products with scalar code only, and runs its quantized
//! matmuls on a second thread pool beside rayon's; these kernels use AVX2 (runtime-detected,
//! scalar fallback) on rayon's pool alone, over weights repacked eight rows at a time
//! ([`crate::kernels::matmul::q4_1_q8_0`]).
//!
//! Formats (ggml, ggml-common.h): a Q4_1 block holds 32 weights as `w[j] = d · q[j] + m`,
//! with `d`, `m` f16 and `q[j]` 4-bit: byte `j` of `qs` holds element `j` in its low nibble
//! and element `j + 16` in its high nibble (20 bytes / 32 weights). A Q8_0 block holds
//! `w[j] = d · q[j]`, `d` f16 and `q[j]` i8 (34 bytes / 32 weights). Activations are
//! quantized per block of 32 as Q8_1: `x[j] ≈ d · q[j]`, `d = max|x| / 127`,
//! `q[j] = round(x[j] / d)`, plus `s = d · Σ q[j]`, so that
//! `Σ w·x ≈ d_w · d_x · Σ q_w q_x + m_w · s_x` (m = 0 for Q8_0).
use crate::kernels::matmul::q4_1_q8_0::{Q4_1x8, Q8_0x8, ROWS};
use crate::kernels::matmul::float::{F32x8, H16x8};
use crate::kernels::matmul::q2_k_q3_k::{Q8Hx8};
use crate::kernels::matmul::q4_k::{Q4KSuper, Q4Kx8, BLOCKS_PER_SUPER};
use crate::kernels::matmul::q6_k::{Q6KSuper, Q6Kx8};
use crate::kernels::matmul::q5::{Q5Kx8, Q5_1x8};
#[cfg(test)]
use crate::kernels::matmul::q8_1::Q8_1Vector;
use anyhow::Result;
use rayon::prelude::*;

/// Values per block.
pub const QK: usize = 32;
/// Bytes of one Q4_1 block: d (f16), m (f16), 16 bytes of nibbles.
pub const Q4_1_BLOCK_BYTES: usize = 20;

/// Bytes of one Q8_0 block: d (f16), 32 signed bytes.
pub const Q8_0_BLOCK_BYTES: usize = 34;

/// The weights of a [`QuantMatrix`], eight rows interleaved.
#[derive(Debug, Clone)]
pub(crate) enum Packed {
    Q4_1(Vec<Q4_1x8>),
    Q8_0(Vec<Q8_0x8>),
    /// The K-quants and Q5_1 ([`crate::kernels::matmul::q2_k_q3_k`]).
    Q8H(Vec<Q8Hx8>),
    /// Q4_K in its own layout ([`crate::kernels::matmul::q4_k`]): block columns, and one super-block of
    /// scales per eight of them.
    Q4K {
        blocks: Vec<Q4Kx8>,
        supers: Vec<Q4KSuper>,
    },
    /// Q6_K in its own layout ([`crate::kernels::matmul::q6_k`]), as [`Packed::Q4K`].
    Q6K {
        blocks: Vec<Q6Kx8>,
        supers: Vec<Q6KSuper>,
    },
    /// Q5_0 and Q5_1 ([`crate::kernels::matmul::q5`]): Q4_1's nibbles and a plane of fifth bits.
    Q5_1(Vec<Q5_1x8>),
    /// Q5_K in its own layout ([`crate::kernels::matmul::q5`]), Q4_K's super-blocks of scales.
    Q5K {
        blocks: Vec<Q5Kx8>,
        supers: Vec<Q4KSuper>,
    },
    /// F16 weights ([`crate::kernels::matmul::float`]), multiplied against f32 inputs.
    F16(Vec<H16x8>),
    /// BF16 weights, as [`Packed::F16`].
    BF16(Vec<H16x8>),
    /// F32 weights, as [`Packed::F16`].
    F32(Vec<F32x8>),
}

/// A GGUF weight matrix `[rows, cols]` on our kernels — quantized (Q4_0 … Q8_0, the
/// K-quants) or F16/BF16/F32 — repacked at load into groups of eight rows
/// ([`crate::kernels::matmul::q4_1_q8_0`] and the other `packed_*` layouts).
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    rows: usize,
    cols: usize,
    packed: Packed,
    /// Whether pairs of groups alternate block by block ([`q4_1_q8_0::interleave_pairs`]), as
    /// the 512-bit kernels that read them on this CPU stream best; else group after group.
    pairs_interleaved: bool,
}

/// Groups of eight rows handed to one thread at a time (32 rows: small enough to balance
/// two threads on a 576-row matrix, large enough to amortize the task; measured best of 16/32/64).
const GROUPS_PER_TASK: usize = 4;

/// Hands the results `ys[k]` (one value per weight row) of inputs `v0 + k` to `put`.
#[inline]
fn scatter<const R: usize>(put: &mut impl FnMut(usize, &[f32]), v0: usize, ys: &[[f32; R]]) {
    for (k, y) in ys.iter().enumerate() {
        put(v0 + k, y);
    }
}

/// Run `$kernel` (generic over its number of inputs) on the next inputs of `$rest` —
/// eight (when `$eight`: the VNNI kernels have the registers for it), four, three, two or
/// one at a time — handing the results to `$put` from input `$v0` on; evaluates to how many
/// inputs it took. Each input's arithmetic is the same in any grouping.
#[cfg(target_arch = "x86_64")]
macro_rules! next_inputs {
    ($kernel:path, ($($blocks:expr),+), $rest:expr, $put:expr, $v0:expr, $eight:expr) => {
        match $rest {
            [a, b, c, d, e, f, g, h, ..] if $eight => {
                $put($v0, &$kernel($($blocks),+, [a, b, c, d, e, f, g, h]));
                8
            }
            [a, b, c, d, ..] => {
                $put($v0, &$kernel($($blocks),+, [a, b, c, d]));
                4
            }
            [a, b, c] => {
                $put($v0, &$kernel($($blocks),+, [a, b, c]));
                3
            }
            [a, b] => {
                $put($v0, &$kernel($($blocks),+, [a, b]));
                2
            }
            [a, ..] => {
                $put($v0, &$kernel($($blocks),+, [a]));
                1
            }
            [] => 1,
        }
    };
}

impl QuantMatrix {
    /// `[rows, cols]`.
    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Bytes of the weights the decode kernels read: rows rounded up to groups of eight ·
    /// the bytes of a row in this layout (20 per 32 weights for Q4_1, 34 for Q8_0, 2 per
    /// weight for F16/BF16, …).
    pub fn bytes(&self) -> u64 {
        let per_row = match &self.packed {
            Packed::Q4_1(_) => self.cols / QK * Q4_1_BLOCK_BYTES,
            Packed::Q8_0(_) => self.cols / QK * Q8_0_BLOCK_BYTES,
            Packed::Q8H(_) => self.cols / QK * q2_k_q3_k::Q8H_BYTES_PER_BLOCK,
            Packed::Q4K { .. } => self.cols / QK_K * q4_k::Q4K_BYTES_PER_SUPER,
            Packed::Q6K { .. } => self.cols / QK_K * q6_k::Q6K_BYTES_PER_SUPER,
            Packed::Q5_1(_) => self.cols / QK * q5::Q5_1_BYTES_PER_BLOCK,
            Packed::Q5K { .. } => self.cols / QK_K * q5::Q5K_BYTES_PER_SUPER,
            Packed::F16(_) | Packed::BF16(_) => self.cols * 2,
            Packed::F32(_) => self.cols * 4,
        };
        (self.groups() * ROWS * per_row) as u64
    }

    /// Number of eight-row groups (the last may be padded with zero rows).
    fn groups(&self) -> usize {
        self.rows.div_ceil(ROWS)
    }

    /// `X · Wᵀ` for prompt rows, bit-identical to [`crate::kernels::gemm::DenseMatrix::matmul`] over
    /// [`QuantMatrix::dequantize`]'s weights but reading these blocks (a quarter to a sixth
    /// of the f32 bytes): `xs` `[n, cols]` → `[n, rows]` (`kernels::gemm::dequant`). `None`
    /// where that kernel does not run on this CPU (neither AVX-512F nor AVX2 + FMA + F16C, or
    /// portable kernels forced).
    /// Errors: `xs.len()` not a multiple of `cols`.
    pub fn dense_matmul(&self, xs: &[f32]) -> Option<Result<Vec<f32>>> {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::kernels::gemm::dequant;
            if !dequant::available()
                || !matches!(self.packed, Packed::Q4_1(_) | Packed::Q8_0(_))
            {
                return None;
            }
            if self.cols == 0 || !xs.len().is_multiple_of(self.cols) {
                return Some(Err(anyhow::anyhow!(
                    "input of {} values is not rows of {}",
                    xs.len(),
                    self.cols
                )));
            }
            Some(Ok(dequant::matmul(
                &self.packed,
                self.pairs_interleaved,
                self.rows,
                self.cols,
                xs,
            )))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = xs;
            None
        }
    }

    /// The weights as f32, row-major `[rows, cols]` (for tests and dense copies).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        // Rows are independent: in parallel (this runs once per weight at load).
        out.par_chunks_mut(self.cols.max(1))
            .enumerate()
            .for_each(|(row, o)| self.dequantize_row_into(row, o));
        out
    }

    /// Row `row` as f32 into `out` (`cols` values), the same values as that row of
    /// [`QuantMatrix::dequantize`]: a token embedding's lookup, with no allocation.
    /// Errors: `row` past the matrix, or `out` not `cols` long.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) -> Result<()> {
        if row >= self.rows || out.len() != self.cols {
            anyhow::bail!(
                "row {row} ({} values) of a [{}, {}] matrix",
                out.len(),
                self.rows,
                self.cols
            );
        }
        self.dequantize_row_into(row, out);
        Ok(())
    }

    /// Row `row` (< rows) into `out` (`cols` values).
    fn dequantize_row_into(&self, row: usize, out: &mut [f32]) {
        for (col, blk) in out.chunks_exact_mut(QK).enumerate() {
            let at = self.block_index(row / ROWS, col);
            match &self.packed {
                Packed::Q4_1(b) => q4_1_q8_0::dequantize_q4_1(&b[at], row % ROWS, blk),
                Packed::Q8_0(b) => q4_1_q8_0::dequantize_q8_0(&b[at], row % ROWS, blk),
                Packed::Q8H(b) => q2_k_q3_k::dequantize_q8h(&b[at], row % ROWS, blk),
                Packed::Q4K { blocks, supers } => {
                    let s = &supers[self.super_index(row / ROWS, col)];
                    q4_k::dequantize_q4k(&blocks[at], s, row % ROWS, blk)
                }
                Packed::Q6K { blocks, supers } => {
                    let s = &supers[self.super_index(row / ROWS, col)];
                    q6_k::dequantize_q6k(&blocks[at], s, row % ROWS, blk)
                }
                Packed::Q5_1(b) => q5::dequantize_q5_1(&b[at], row % ROWS, blk),
                Packed::Q5K { blocks, supers } => {
                    let s = &supers[self.super_index(row / ROWS, col)];
                    q5::dequantize_q5k(&blocks[at], s, row % ROWS, blk)
                }
                Packed::F16(b) => {
                    float::dequantize_h16(&b[at], row % ROWS, float::f16_to_f32, blk)
                }
                Packed::BF16(b) => {
                    float::dequantize_h16(&b[at], row % ROWS, float::bf16_to_f32, blk)
                }
                Packed::F32(b) => float::dequantize_f32(&b[at], row % ROWS, blk),
            }
        }
    }

    /// Index of the super-block (eight block columns) holding block column `b` of group `g`
    /// ([`Packed::Q4K`]; groups one after the other).
    fn super_index(&self, g: usize, b: usize) -> usize {
        g * (self.cols / QK_K) + b / BLOCKS_PER_SUPER
    }

    /// The super-blocks of group `g` ([`Packed::Q4K`]; empty for other layouts' matrices
    /// whose rows are not whole super-blocks).
    fn super_range(&self, g: usize) -> std::ops::Range<usize> {
        let per = self.cols / QK_K;
        g * per..(g + 1) * per
    }

    /// `y = W · x` for each row of `xs` (`[n, cols]` row-major) → `[n, rows]` row-major.
    /// Each output element depends only on its weight row and its input row, computed the
    /// same way whatever `n` is. Errors: `xs.len()` not a multiple of `cols`.
    pub fn matmul(&self, xs: &[f32]) -> Result<Vec<f32>> {
        let mut out = matmul_group(&[self], xs)?;
        Ok(out.pop().unwrap_or_default())
    }
}

pub mod float;
#[cfg(target_arch = "x86_64")]
pub(crate) mod float_avx2;
pub mod q2_k_q3_k;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q2_k_q3_k_avx2;
pub mod q4_1_q8_0;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q4_1_q8_0_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q4_1_q8_0_vnni512;
pub mod q4_k;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q4_k_avx2;
pub mod q5;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q5_avx2;
pub mod q6_k;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q6_k_avx2;
pub mod q8_1;
pub mod quantize_q4_k;

mod batch;
mod float_matrix;
mod group;
mod kernel;
mod kquants;
mod load;
mod repack;
pub use batch::matmul_group;
use kernel::Kernel;
pub use kernel::{dense_from_blocks, vnni_bits};
pub use kquants::{
    Q2_K_BLOCK_BYTES, Q3_K_BLOCK_BYTES, Q4_K_BLOCK_BYTES, Q5_1_BLOCK_BYTES, Q5_K_BLOCK_BYTES,
    Q6_K_BLOCK_BYTES, QK_K,
};
#[cfg(test)]
use load::pairs_interleaved_here;
pub use repack::{Q4_0_BLOCK_BYTES, Q5_0_BLOCK_BYTES};

#[cfg(test)]
mod tests;
