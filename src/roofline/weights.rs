//! The bytes of a model's weight matrices as each kernel path stores them, from the GGUF
//! header (tensor types and shapes) or, for a Hugging Face folder, from the config.
use crate::kernels::matmul::float::{F32_BLOCK_BYTES, H16_BLOCK_BYTES};
use crate::kernels::matmul::q2_k_q3_k::Q8H_BYTES_PER_BLOCK;
use crate::kernels::matmul::q4_k::Q4K_BYTES_PER_SUPER;
use crate::kernels::matmul::q5::{Q5K_BYTES_PER_SUPER, Q5_1_BYTES_PER_BLOCK};
use crate::kernels::matmul::q6_k::Q6K_BYTES_PER_SUPER;
use crate::kernels::matmul::{Q4_1_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK, QK_K};
use crate::model::gguf::header::ForeignTensor;
use crate::model::gguf::GgufFile;
use crate::model::linear::FEW_PROMPT_ROWS;
use crate::model::ModelConfig;
use crate::roofline::counts::WeightBytes;
use anyhow::{bail, Result};
use candle_core::quantized::gguf_file::{Content, TensorInfo};
use candle_core::quantized::GgmlDType;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// Rows per group of the decode kernels' packed layout (the last group is zero-padded).
const PACKED_ROWS: u64 = 8;

/// The weight bytes each phase's kernels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ModelWeights {
    /// What a decode step reads: the quantized matrices (GGUF) or the f32 ones (HF folder).
    pub decode: WeightBytes,
    /// What a prefill reads: the f32 copy packed at load for dense prefill (4 bytes per
    /// weight), else the same matrices as decode.
    pub prefill: WeightBytes,
    /// True when `prefill` is a second copy beside `decode` (GGUF with dense prefill): a
    /// pass mixing prompt and generated rows (naive decode) reads both.
    pub separate_prefill_copy: bool,
    /// True when the dense prefill reads the GGUF blocks instead of the f32 copy for a
    /// prompt of at most [`FEW_PROMPT_ROWS`] tokens and for the LM head's row (CPUs with
    /// AVX-512F, or AVX2 + FMA + F16C: [`crate::kernels::matmul::QuantMatrix::dense_matmul`]).
    pub prefill_from_blocks: bool,
}

impl ModelWeights {
    /// What a prompt run on the decode kernels reads (`--prefill-kernel quantized`, or
    /// `auto` below its threshold): the decode matrices, no separate copy.
    pub fn for_quantized_prompts(&self) -> ModelWeights {
        ModelWeights {
            decode: self.decode,
            prefill: self.decode,
            separate_prefill_copy: false,
            prefill_from_blocks: false,
        }
    }

    /// Whether the `prompt` rows of a pass read the quantized blocks rather than the f32
    /// copy (a prompt of at most [`FEW_PROMPT_ROWS`] tokens, where
    /// [`ModelWeights::prefill_from_blocks`]).
    pub fn prompt_reads_blocks(&self, prompt: u64) -> bool {
        self.separate_prefill_copy && self.prefill_from_blocks && prompt <= FEW_PROMPT_ROWS as u64
    }

    /// The weight bytes a prefill of `prompt` tokens reads: the layers' f32 copy, or their
    /// blocks for a short prompt ([`ModelWeights::prompt_reads_blocks`]); the LM head (one
    /// row) likewise where [`ModelWeights::prefill_from_blocks`].
    pub fn prefill_for(&self, prompt: u64) -> WeightBytes {
        if !(self.separate_prefill_copy && self.prefill_from_blocks) {
            return self.prefill;
        }
        WeightBytes {
            layers: if self.prompt_reads_blocks(prompt) {
                self.decode.layers
            } else {
                self.prefill.layers
            },
            lm_head: self.decode.lm_head,
        }
    }
}

/// The weight bytes of the model at `path` (a `.gguf` file or an HF folder) with config
/// `c`; `dense_prefill` as `--prefill-kernel dense` loads it. Reads only the GGUF header.
///
/// Errors: the file cannot be read as GGUF, or a matrix the decoder needs is missing.
pub fn model_weights(path: &Path, c: &ModelConfig, dense_prefill: bool) -> Result<ModelWeights> {
    if path.is_dir() {
        // Safetensors weights are converted to f32 at load and computed in f32.
        let f32 = WeightBytes::uniform(c, 4);
        return Ok(ModelWeights {
            decode: f32,
            prefill: f32,
            separate_prefill_copy: false,
            prefill_from_blocks: false,
        });
    }
    let gguf = GgufFile::open(path)?;
    let dense = ModelWeights {
        decode: gguf_weight_bytes(&gguf.content, &gguf.foreign, c)?,
        prefill: WeightBytes::uniform(c, 4),
        separate_prefill_copy: true,
        prefill_from_blocks: crate::kernels::matmul::dense_from_blocks(),
    };
    Ok(if dense_prefill {
        dense
    } else {
        dense.for_quantized_prompts()
    })
}

/// [`model_weights`] for a loaded model: a Hugging Face folder quantized at load
/// (`--quantize`) reads the blocks its decoder holds (each matrix's
/// [`crate::kernels::matmul::QuantMatrix::bytes`], an f32 fallback matrix at 4 bytes per
/// weight), and its prompts the f32 weights only where they were kept
/// (`--prefill-kernel dense|auto`); anything else as [`model_weights`] counts it from the
/// header. Errors: as [`model_weights`].
pub fn loaded_model_weights(
    path: &Path,
    c: &ModelConfig,
    w: &crate::model::decoder::DecoderWeights,
    dense_prefill: bool,
) -> Result<ModelWeights> {
    // The first layer's first matrix (GQA's Q projection) says how the matrices are held.
    let first = w.layers.first().and_then(|l| l.matrices().first().copied());
    let quantized = first.is_some_and(|m| m.quant.is_some());
    if !(path.is_dir() && quantized) {
        return model_weights(path, c, dense_prefill);
    }
    let bytes = |l: &crate::model::linear::Linear| match &l.quant {
        Some(q) => q.bytes(),
        None => l.dense.as_ref().map_or(0, |d| 4 * d.elem_count() as u64),
    };
    let layers = w.layers.iter().flat_map(|l| l.matrices()).map(bytes).sum();
    let decode = WeightBytes {
        layers,
        lm_head: bytes(&w.lm_head),
    };
    let kept_f32 = first.is_some_and(|m| m.dense.is_some());
    let quantized = ModelWeights {
        decode,
        prefill: decode,
        separate_prefill_copy: false,
        prefill_from_blocks: false,
    };
    Ok(match dense_prefill && kept_f32 {
        true => ModelWeights {
            prefill: WeightBytes::uniform(c, 4),
            separate_prefill_copy: true,
            ..quantized
        },
        false => quantized,
    })
}

/// Sum of [`tensor_bytes`] over the matrices a decode step reads: `blk.N.{attn_q, attn_k,
/// attn_v, attn_output, ffn_gate, ffn_up, ffn_down}.weight` for every layer (a mixture of
/// experts: the router and k/E of each `_exps` tensor, one sequence's k experts), and the LM head
/// (`output.weight`, or `token_embd.weight` when the embeddings are tied).
///
/// Errors: a missing tensor, named.
pub fn gguf_weight_bytes(
    content: &Content,
    foreign: &HashMap<String, ForeignTensor>,
    c: &ModelConfig,
) -> Result<WeightBytes> {
    let get = |name: &str| -> Result<u64> {
        match (content.tensor_infos.get(name), foreign.get(name)) {
            (Some(info), _) => Ok(tensor_bytes(info)),
            (None, Some(t)) => Ok(foreign_bytes(t)),
            (None, None) => bail!("the GGUF has no tensor {name}"),
        }
    };
    let names = crate::model::gguf::decoder_matrix_names(c);
    let Some((head, layer_names)) = names.split_last() else {
        bail!("no weight matrices");
    };
    let mut layers = 0;
    for name in layer_names {
        // An older MLA file fuses k_b and v_b into `attn_kv_b`: counted once, for k_b.
        if name.ends_with(".attn_v_b.weight") && !content.tensor_infos.contains_key(name) {
            continue;
        }
        let fused = name.replace(".attn_k_b.", ".attn_kv_b.");
        if name.ends_with(".attn_k_b.weight") && !content.tensor_infos.contains_key(name) {
            layers += get(&fused)?;
            continue;
        }
        // One token reads k of an expert tensor's E experts (all the same size).
        layers += match (c.moe, name.ends_with("_exps.weight")) {
            (Some(m), true) => get(name)? / m.num_experts as u64 * m.num_experts_per_tok as u64,
            _ => get(name)?,
        };
    }
    Ok(WeightBytes {
        layers,
        lm_head: get(head)?,
    })
}

/// Bytes the decode kernels read for a tensor of a type candle does not know (MXFP4: 17 per
/// 32 weights, rows packed eight at a time as [`tensor_bytes`] counts them).
pub fn foreign_bytes(t: &ForeignTensor) -> u64 {
    let (block, size) = t.ty.block();
    let (count, rows, cols) = match t.dims[..] {
        [rows, cols] => (1, rows as u64, cols as u64),
        [experts, rows, cols] => (experts as u64, rows as u64, cols as u64),
        _ => return t.bytes(),
    };
    count * rows.div_ceil(PACKED_ROWS) * PACKED_ROWS * (cols / block) * size
}

/// Bytes the decode kernels read for one GGUF matrix `[rows, cols]` (an expert tensor
/// `[experts, rows, cols]`: `experts` times one expert's):
/// - Q4_1 / Q8_0 (our kernels, rows packed eight at a time, the last group zero-padded):
///   `ceil(rows / 8) · 8 · cols / 32 · 20` (Q4_1) or `· 34` (Q8_0), as
///   [`crate::kernels::matmul::QuantMatrix::bytes`] counts them; Q4_0 as Q4_1, the layout
///   it is repacked into at load (a Q4_0 tensor with a scale past 8,188, stored as Q8_0, is
///   counted as Q4_1); Q5_0 and Q5_1 in the 5-bit layout, 24 bytes per 32 (a Q5_0 tensor
///   with a scale past 4,094, stored as Q8_0, likewise); Q4_K, Q5_K and Q6_K in their own
///   layouts, 148, 180 and 210 bytes per 256 weights (`kernels::matmul::q4_k`, `packed_q5`,
///   `packed_k6`); Q2_K and Q3_K as their repacked layout, 48 bytes per 32 weights
///   (`kernels::matmul::q2_k_q3_k`);
/// - F16 / BF16 / F32 matrices of whole blocks of 32 (our kernels, `kernels::matmul::float`, in
///   the file's precision, rows packed eight at a time): `ceil(rows / 8) · 8 · cols · 2`
///   (or `· 4`); other F32 / F16 / BF16 tensors `4 · elements` (candle's f32);
/// - any other ggml type (candle's kernels over the file's blocks):
///   `ceil(elements / block size) · block bytes`.
pub fn tensor_bytes(info: &TensorInfo) -> u64 {
    let elems = info.shape.elem_count() as u64;
    let dims = info.shape.dims();
    // An expert tensor `[experts, rows, cols]` is `experts` matrices, each packed alone.
    let (count, rows, cols) = match dims {
        [rows, cols] => (1, *rows as u64, *cols as u64),
        [experts, rows, cols] => (*experts as u64, *rows as u64, *cols as u64),
        _ => (1, 1, elems),
    };
    let matrix = dims.len() >= 2;
    let rows = count * rows.div_ceil(PACKED_ROWS) * PACKED_ROWS;
    let packed = |block: u64| rows * (cols / QK as u64) * block;
    match info.ggml_dtype {
        GgmlDType::Q4_1 | GgmlDType::Q4_0 if cols % QK as u64 == 0 => {
            packed(Q4_1_BLOCK_BYTES as u64)
        }
        GgmlDType::Q8_0 if cols % QK as u64 == 0 => packed(Q8_0_BLOCK_BYTES as u64),
        GgmlDType::Q5_0 | GgmlDType::Q5_1 if cols % QK as u64 == 0 => {
            packed(Q5_1_BYTES_PER_BLOCK as u64)
        }
        GgmlDType::Q5K if cols % QK_K as u64 == 0 => {
            rows * (cols / QK_K as u64) * Q5K_BYTES_PER_SUPER as u64
        }
        GgmlDType::Q4K if cols % QK_K as u64 == 0 => {
            rows * (cols / QK_K as u64) * Q4K_BYTES_PER_SUPER as u64
        }
        GgmlDType::Q6K if cols % QK_K as u64 == 0 => {
            rows * (cols / QK_K as u64) * Q6K_BYTES_PER_SUPER as u64
        }
        GgmlDType::Q2K | GgmlDType::Q3K if cols % QK_K as u64 == 0 => {
            packed(Q8H_BYTES_PER_BLOCK as u64)
        }
        GgmlDType::F16 | GgmlDType::BF16 if matrix && cols % QK as u64 == 0 => {
            packed(H16_BLOCK_BYTES as u64)
        }
        GgmlDType::F32 if matrix && cols % QK as u64 == 0 => packed(F32_BLOCK_BYTES as u64),
        GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => 4 * elems,
        t => elems.div_ceil(t.block_size() as u64) * t.type_size() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(dtype: GgmlDType, rows: usize, cols: usize) -> TensorInfo {
        TensorInfo {
            ggml_dtype: dtype,
            shape: candle_core::Shape::from((rows, cols)),
            offset: 0,
        }
    }

    #[test]
    fn tensor_bytes_by_hand() {
        // 576 × 576 Q4_1: 331,776 weights / 32 · 20 bytes = 207,360.
        assert_eq!(tensor_bytes(&info(GgmlDType::Q4_1, 576, 576)), 207_360);
        // 49,152 × 576 Q8_0: 28,311,552 / 32 · 34 = 30,081,024.
        assert_eq!(tensor_bytes(&info(GgmlDType::Q8_0, 49152, 576)), 30_081_024);
        // 10 rows pack as 16: 16 · 64 / 32 · 20 = 640.
        assert_eq!(tensor_bytes(&info(GgmlDType::Q4_1, 10, 64)), 640);
        // F16 and F32 matrices are held as in the file, rows in groups of eight: 8 · 64 · 2
        // and 8 · 64 · 4; a row that is not whole blocks of 32 counts as candle's f32.
        assert_eq!(tensor_bytes(&info(GgmlDType::F16, 3, 64)), 1024);
        assert_eq!(tensor_bytes(&info(GgmlDType::BF16, 3, 64)), 1024);
        assert_eq!(tensor_bytes(&info(GgmlDType::F32, 3, 64)), 2048);
        assert_eq!(tensor_bytes(&info(GgmlDType::F16, 3, 5)), 60);
        // Q4_0 runs repacked as Q4_1 (20 bytes per 32), Q5_0 and Q5_1 in the 5-bit layout
        // (24 per 32).
        assert_eq!(tensor_bytes(&info(GgmlDType::Q4_0, 576, 576)), 207_360);
        assert_eq!(tensor_bytes(&info(GgmlDType::Q5_0, 10, 64)), 16 * 2 * 24);
        assert_eq!(tensor_bytes(&info(GgmlDType::Q5_1, 10, 64)), 16 * 2 * 24);
        // Q4_K, Q5_K and Q6_K in their own layouts, 148, 180 and 210 bytes per row of 256,
        // rows in groups of eight; Q3_K repacked at 48 bytes per 32 weights: 8 · 8 · 48.
        assert_eq!(tensor_bytes(&info(GgmlDType::Q4K, 2, 256)), 1184);
        assert_eq!(tensor_bytes(&info(GgmlDType::Q5K, 2, 256)), 1440);
        assert_eq!(tensor_bytes(&info(GgmlDType::Q6K, 2, 256)), 1680);
        assert_eq!(tensor_bytes(&info(GgmlDType::Q3K, 2, 256)), 3072);
        // Rows that are not whole super-blocks stay candle's: ceil(576 / 256) · 144 bytes.
        assert_eq!(tensor_bytes(&info(GgmlDType::Q4K, 2, 288)), 432);
    }
}
