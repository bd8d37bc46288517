//! gpt-oss's MXFP4 experts as its checkpoints ship them: `{name}_blocks` `[E, rows, cols/32,
//! 16]` and `{name}_scales` `[E, rows, cols/32]`, both U8 (transformers' `Mxfp4Config`
//! layout). A block's 16 bytes hold its 32 E2M1 codes in order, two per byte (value 2j in
//! the low nibble of byte j, 2j + 1 in the high one); its scale is E8M0. ggml's
//! `block_mxfp4` puts the scale first and value j beside value j + 16 (low and high nibble
//! of byte j): the bytes are reordered into it, exactly, and run on our MXFP4 kernels.
//! Source: OCP Microscaling Formats v1.0; llama.cpp's converter (conversion/gpt_oss.py,
//! `transform_nibble_layout`) makes the same bytes.
use super::Checkpoint;
use anyhow::{anyhow, bail, Result};

/// Bytes of an HF MXFP4 block's codes, and of a ggml block (scale + codes).
const CODE_BYTES: usize = 16;
const GGML_BLOCK: usize = 17;

impl Checkpoint {
    /// Whether `{name}_blocks` is in the checkpoint (the experts ship in MXFP4).
    pub(super) fn has_mxfp4(&self, name: &str) -> bool {
        self.contains(&format!("{name}_blocks"))
    }

    /// The `[experts, rows, cols]` MXFP4 tensor `name` as ggml `block_mxfp4` bytes, one
    /// `rows · cols / 32 · 17`-byte buffer per expert, rows in order. Errors (naming the
    /// tensor): either part missing, not U8, or of another shape.
    pub(super) fn mxfp4_experts(
        &self,
        name: &str,
        (experts, rows, cols): (usize, usize, usize),
    ) -> Result<Vec<Vec<u8>>> {
        if cols % 32 != 0 {
            bail!(
                "{}: {name}: rows of {cols} values are not whole MXFP4 blocks of 32",
                self.dir
            );
        }
        let per_row = cols / 32;
        let blocks = self.u8_tensor(
            &format!("{name}_blocks"),
            &[experts, rows, per_row, CODE_BYTES],
        )?;
        let scales = self.u8_tensor(&format!("{name}_scales"), &[experts, rows, per_row])?;
        let per_expert = rows * per_row;
        Ok((0..experts)
            .map(|e| {
                let range = e * per_expert..(e + 1) * per_expert;
                scales[range.clone()]
                    .iter()
                    .zip(
                        blocks[range.start * CODE_BYTES..range.end * CODE_BYTES]
                            .chunks_exact(CODE_BYTES),
                    )
                    .flat_map(|(&scale, codes)| ggml_block(scale, codes))
                    .collect()
            })
            .collect())
    }

    /// The bytes of U8 tensor `name`, checked to have `shape`. Errors: missing, another
    /// dtype or shape (named).
    fn u8_tensor(&self, name: &str, shape: &[usize]) -> Result<&[u8]> {
        let view = self
            .tensors
            .get(name)
            .map_err(|_| anyhow!("{}: the checkpoint has no tensor {name}", self.dir))?;
        if view.dtype() != safetensors::Dtype::U8 {
            bail!(
                "{}: tensor {name} is stored as {:?}; MXFP4 blocks and scales are U8",
                self.dir,
                view.dtype()
            );
        }
        if view.shape() != shape {
            bail!(
                "{}: tensor {name} has shape {:?}, expected {shape:?}",
                self.dir,
                view.shape()
            );
        }
        Ok(view.data())
    }
}

/// One ggml `block_mxfp4` from an HF block: the scale, then byte j = code j | code (j + 16) << 4.
fn ggml_block(scale: u8, codes: &[u8]) -> [u8; GGML_BLOCK] {
    let code = |i: usize| (codes[i / 2] >> (4 * (i % 2))) & 0x0F;
    let mut out = [0u8; GGML_BLOCK];
    out[0] = scale;
    for (j, o) in out[1..].iter_mut().enumerate() {
        *o = code(j) | (code(j + 16) << 4);
    }
    out
}

/// Rows `first, first + 2, …` of a matrix of `row_bytes`-byte rows: gpt-oss's fused
/// gate/up rows, the gate's the even ones and the up's the odd.
pub(super) fn every_other_row(bytes: &[u8], row_bytes: usize, first: usize) -> Vec<u8> {
    bytes
        .chunks_exact(row_bytes)
        .skip(first)
        .step_by(2)
        .flatten()
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    /// Value i of an HF block lands where ggml's layout reads value i (code `(7i + 3) mod 16`).
    #[test]
    fn hf_block_becomes_ggml_block() {
        let vals: Vec<u8> = (0..32).map(|i| ((7 * i + 3) % 16) as u8).collect();
        let hf: Vec<u8> = (0..16)
            .map(|j| vals[2 * j] | (vals[2 * j + 1] << 4))
            .collect();
        let g = super::ggml_block(122, &hf);
        assert_eq!(g[0], 122);
        for i in 0..32 {
            let byte = g[1 + i % 16];
            let code = if i < 16 { byte & 0x0F } else { byte >> 4 };
            assert_eq!(code, vals[i], "value {i}");
        }
    }

    #[test]
    fn every_other_row_splits_gate_and_up() {
        let rows = [1u8, 1, 2, 2, 3, 3, 4, 4];
        assert_eq!(super::every_other_row(&rows, 2, 0), [1, 1, 3, 3]);
        assert_eq!(super::every_other_row(&rows, 2, 1), [2, 2, 4, 4]);
    }
}
