//! Loading a [`QuantMatrix`]: the ggml bytes checked and repacked eight rows at a time
//! ([`q4_1_q8_0::interleave`]), then, where the 512-bit kernels read them, each pair of
//! groups interleaved block by block ([`q4_1_q8_0::interleave`] with `pairs`); and where a group's
//! blocks lie in either layout.
use super::{Kernel, Packed, QuantMatrix, Q4_1_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK};
use crate::kernels::matmul::q4_1_q8_0::{self, Q4_1x8, Q8_0x8};
use anyhow::{bail, Result};

/// Check `bytes` holds `rows · cols / 32` blocks of `block_bytes`. Errors name the format.
fn check_size(
    format: &str,
    bytes: &[u8],
    block_bytes: usize,
    rows: usize,
    cols: usize,
) -> Result<()> {
    if !cols.is_multiple_of(QK) {
        bail!("{format} rows of {cols} values are not whole blocks of {QK}");
    }
    let need = rows * (cols / QK) * block_bytes;
    if bytes.len() != need {
        bail!(
            "{format} tensor [{rows}, {cols}] needs {need} bytes, got {}",
            bytes.len()
        );
    }
    Ok(())
}

/// Whether this CPU's kernels read pairs of groups interleaved: when the decode kernels
/// are the 512-bit ones ([`Kernel::Vnni512`]) and the dense product from the blocks runs
/// on AVX-512F too (both read two groups at a time). Every other kernel reads one group's
/// blocks as one slice, so the groups stay one after the other.
pub(super) fn pairs_interleaved_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    return matches!(Kernel::detect(), Kernel::Vnni512) && crate::kernels::gemm::fma_lanes() == 16;
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The blocks of a `[rows, cols]` ggml tensor (`block_bytes` each, checked), in groups of
/// eight rows (`fill` copies one ggml block into a group's row), pairs interleaved or not.
pub(super) fn pack<T: Default + Send>(
    format: &str,
    bytes: &[u8],
    block_bytes: usize,
    (rows, cols): (usize, usize),
    fill: impl Fn(&mut T, usize, &[u8]) + Sync + Send,
    pairs_interleaved: bool,
) -> Result<Vec<T>> {
    check_size(format, bytes, block_bytes, rows, cols)?;
    Ok(q4_1_q8_0::interleave(
        bytes,
        block_bytes,
        rows,
        cols / QK,
        pairs_interleaved,
        fill,
    ))
}

impl QuantMatrix {
    /// Parse raw ggml Q4_1 bytes of a `[rows, cols]` tensor.
    /// Errors: `cols` not a multiple of 32, or a byte count that does not match.
    pub fn from_ggml_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        Self::q4_1_laid_out(bytes, rows, cols, pairs_interleaved_here())
    }

    /// [`Self::from_ggml_bytes`] with pairs of groups interleaved or not.
    pub(super) fn q4_1_laid_out(
        bytes: &[u8],
        rows: usize,
        cols: usize,
        pairs_interleaved: bool,
    ) -> Result<QuantMatrix> {
        let fill = q4_1_q8_0::fill_q4_1;
        let blocks: Vec<Q4_1x8> = pack(
            "Q4_1",
            bytes,
            Q4_1_BLOCK_BYTES,
            (rows, cols),
            fill,
            pairs_interleaved,
        )?;
        Ok(QuantMatrix {
            rows,
            cols,
            packed: Packed::Q4_1(blocks),
            pairs_interleaved,
        })
    }

    /// Parse raw ggml Q8_0 bytes of a `[rows, cols]` tensor.
    /// Errors: `cols` not a multiple of 32, or a byte count that does not match.
    pub fn from_ggml_q8_0_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        Self::q8_0_laid_out(bytes, rows, cols, pairs_interleaved_here())
    }

    /// [`Self::from_ggml_q8_0_bytes`] with pairs of groups interleaved or not.
    pub(super) fn q8_0_laid_out(
        bytes: &[u8],
        rows: usize,
        cols: usize,
        pairs_interleaved: bool,
    ) -> Result<QuantMatrix> {
        let fill = q4_1_q8_0::fill_q8_0;
        let blocks: Vec<Q8_0x8> = pack(
            "Q8_0",
            bytes,
            Q8_0_BLOCK_BYTES,
            (rows, cols),
            fill,
            pairs_interleaved,
        )?;
        Ok(QuantMatrix {
            rows,
            cols,
            packed: Packed::Q8_0(blocks),
            pairs_interleaved,
        })
    }

    /// [`Self::from_ggml_mxfp4_bytes`] for a file's bytes. Errors also on a block whose
    /// scale byte is 255, E8M0's NaN: damage, refused rather than turning every logit that
    /// reads the row into NaN later ("row R, block B holds a scale that is not a finite
    /// number (E8M0 255, NaN): the file is damaged").
    pub fn from_file_mxfp4_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        if let Some((r, b)) = super::mxfp4::nan_scale(bytes, cols) {
            bail!("row {r}, block {b} holds a scale that is not a finite number (E8M0 255, NaN): the file is damaged");
        }
        Self::from_ggml_mxfp4_bytes(bytes, rows, cols)
    }

    /// Parse raw ggml MXFP4 bytes of a `[rows, cols]` tensor ([`crate::kernels::matmul::mxfp4`];
    /// groups one after the other: the 512-bit pair kernels do not read this layout).
    /// Every byte pattern is taken as ggml's reference reads it (a scale byte of 255 too:
    /// the loaders refuse it first, [`crate::kernels::matmul::mxfp4::nan_scale`]).
    /// Errors: `cols` not a multiple of 32, or a byte count that does not match.
    pub fn from_ggml_mxfp4_bytes(bytes: &[u8], rows: usize, cols: usize) -> Result<QuantMatrix> {
        let blocks = pack(
            "MXFP4",
            bytes,
            super::mxfp4::MXFP4_BLOCK_BYTES,
            (rows, cols),
            super::mxfp4::fill_mxfp4,
            false,
        )?;
        Ok(QuantMatrix {
            rows,
            cols,
            packed: Packed::Mxfp4(blocks),
            pairs_interleaved: false,
        })
    }

    /// Groups `g` and `g + 1` of `blocks` (this matrix's packed blocks) as the 512-bit
    /// kernels read them. Panics when `g + 1` is not a group.
    pub(super) fn pair<'a, T>(&self, blocks: &'a [T], g: usize) -> q4_1_q8_0::PairBlocks<'a, T> {
        q4_1_q8_0::PairBlocks::of_groups(blocks, g, self.cols / QK, self.pairs_interleaved)
    }

    /// Whether group `g`'s blocks lie one after the other: always when groups follow one
    /// another, only for a lone last group when pairs are interleaved.
    fn contiguous(&self, g: usize) -> bool {
        !self.pairs_interleaved || (g + 1 == self.groups() && g.is_multiple_of(2))
    }

    /// The blocks of group `g` alone, which [`Self::group_dot_many`]'s kernels read as one
    /// slice. Panics when the group is half of an interleaved pair.
    pub(super) fn group_range(&self, g: usize) -> std::ops::Range<usize> {
        assert!(
            self.contiguous(g),
            "group {g} is half of an interleaved pair"
        );
        let bpr = self.cols / QK;
        g * bpr..(g + 1) * bpr
    }

    /// Index in the packed blocks of group `g`'s block column `b`.
    pub(super) fn block_index(&self, g: usize, b: usize) -> usize {
        let bpr = self.cols / QK;
        if self.contiguous(g) {
            g * bpr + b
        } else {
            (g - g % 2) * bpr + 2 * b + g % 2
        }
    }
}
