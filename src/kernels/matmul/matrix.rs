//! [`QuantMatrix`]: a GGUF weight matrix on our kernels, its rows repacked in groups of eight
//! ([`Packed`]: one layout per weight type, in the files beside this one), with what it
//! holds (dimensions, bytes) and its weights back as f32 (dequantization).
use super::float;
use super::float::{F32x8, H16x8};
use super::mxfp4::{self, Mxfp4x8};
use super::q2_k_q3_k::{self, Q8Hx8};
use super::q4_1_q8_0::{self, Q4_1x8, Q8_0x8, ROWS};
use super::q4_k::{self, Q4KSuper, Q4Kx8, BLOCKS_PER_SUPER, QK_K};
use super::q5::{self, Q5Kx8, Q5_1x8};
use super::q6_k::{self, Q6KSuper, Q6Kx8};
use crate::kernels::matmul::q8_1::QK;
use anyhow::Result;
use rayon::prelude::*;

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
    /// MXFP4 ([`crate::kernels::matmul::mxfp4`]): E8M0 scale bytes and E2M1 codes.
    Mxfp4(Vec<Mxfp4x8>),
}

/// A GGUF weight matrix `[rows, cols]` on our kernels — quantized (Q4_0 … Q8_0, the
/// K-quants) or F16/BF16/F32 — repacked at load into groups of eight rows
/// ([`crate::kernels::matmul::q4_1_q8_0`] and the other `packed_*` layouts).
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) packed: Packed,
    /// Whether pairs of groups alternate block by block ([`q4_1_q8_0::interleave`] with `pairs`), as
    /// the 512-bit kernels that read them on this CPU stream best; else group after group.
    pub(super) pairs_interleaved: bool,
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
            Packed::Mxfp4(_) => self.cols / QK * mxfp4::MXFP4_BLOCK_BYTES,
        };
        (self.groups() * ROWS * per_row) as u64
    }

    /// Number of eight-row groups (the last may be padded with zero rows).
    pub(super) fn groups(&self) -> usize {
        self.rows.div_ceil(ROWS)
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
    pub(super) fn dequantize_row_into(&self, row: usize, out: &mut [f32]) {
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
                Packed::F16(b) => float::dequantize_h16(&b[at], row % ROWS, float::f16_to_f32, blk),
                Packed::BF16(b) => {
                    float::dequantize_h16(&b[at], row % ROWS, float::bf16_to_f32, blk)
                }
                Packed::F32(b) => float::dequantize_f32(&b[at], row % ROWS, blk),
                Packed::Mxfp4(b) => mxfp4::dequantize_mxfp4(&b[at], row % ROWS, blk),
            }
        }
    }

    /// Index of the super-block (eight block columns) holding block column `b` of group `g`
    /// ([`Packed::Q4K`]; groups one after the other).
    pub(super) fn super_index(&self, g: usize, b: usize) -> usize {
        g * (self.cols / QK_K) + b / BLOCKS_PER_SUPER
    }

    /// The super-blocks of group `g` ([`Packed::Q4K`]; empty for other layouts' matrices
    /// whose rows are not whole super-blocks).
    pub(super) fn super_range(&self, g: usize) -> std::ops::Range<usize> {
        let per = self.cols / QK_K;
        g * per..(g + 1) * per
    }
}
