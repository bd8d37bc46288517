//! Which of a GGUF's matrices our kernels hold and which run on candle's: the one list of
//! types ours take ([`ours`]), the repack at load with its scale check ([`quant_matrix`]),
//! the decoder's matrix names, and the warning naming the matrices off our kernels.
use super::GgufFile;
use crate::kernels::quant::{
    QuantMatrix, Q2_K_BLOCK_BYTES, Q3_K_BLOCK_BYTES, Q4_0_BLOCK_BYTES, Q4_1_BLOCK_BYTES,
    Q4_K_BLOCK_BYTES, Q5_0_BLOCK_BYTES, Q5_1_BLOCK_BYTES, Q5_K_BLOCK_BYTES, Q6_K_BLOCK_BYTES,
    Q8_0_BLOCK_BYTES, QK, QK_K,
};
use crate::model::config::ModelConfig;
use anyhow::{bail, Context, Result};
use candle_core::quantized::{GgmlDType, QTensor};

/// How our kernels take a ggml type: its block's bytes and weights, the offsets of its f16
/// scale fields (scales, minima, Q4_1's offset), and the constructor that repacks it.
struct Ours {
    block_bytes: usize,
    weights: usize,
    f16_fields: &'static [usize],
    repack: fn(&[u8], usize, usize) -> Result<QuantMatrix>,
}

/// How our kernels take ggml type `t`; None for the types they do not hold (they run on
/// candle's). The one list of "ours", for the loader and for the warning about the rest.
fn ours(t: GgmlDType) -> Option<Ours> {
    let (block_bytes, weights, f16_fields, repack): (_, _, &'static [usize], _) = match t {
        GgmlDType::Q4_1 => (
            Q4_1_BLOCK_BYTES,
            QK,
            &[0, 2],
            QuantMatrix::from_ggml_bytes as _,
        ),
        GgmlDType::Q8_0 => (
            Q8_0_BLOCK_BYTES,
            QK,
            &[0],
            QuantMatrix::from_ggml_q8_0_bytes as _,
        ),
        GgmlDType::Q4_0 => (
            Q4_0_BLOCK_BYTES,
            QK,
            &[0],
            QuantMatrix::from_ggml_q4_0_bytes as _,
        ),
        GgmlDType::Q5_0 => (
            Q5_0_BLOCK_BYTES,
            QK,
            &[0],
            QuantMatrix::from_ggml_q5_0_bytes as _,
        ),
        GgmlDType::Q5_1 => (
            Q5_1_BLOCK_BYTES,
            QK,
            &[0, 2],
            QuantMatrix::from_ggml_q5_1_bytes as _,
        ),
        GgmlDType::Q2K => (
            Q2_K_BLOCK_BYTES,
            QK_K,
            &[80, 82],
            QuantMatrix::from_ggml_q2_k_bytes as _,
        ),
        GgmlDType::Q3K => (
            Q3_K_BLOCK_BYTES,
            QK_K,
            &[108],
            QuantMatrix::from_ggml_q3_k_bytes as _,
        ),
        GgmlDType::Q4K => (
            Q4_K_BLOCK_BYTES,
            QK_K,
            &[0, 2],
            QuantMatrix::from_ggml_q4_k_bytes as _,
        ),
        GgmlDType::Q5K => (
            Q5_K_BLOCK_BYTES,
            QK_K,
            &[0, 2],
            QuantMatrix::from_ggml_q5_k_bytes as _,
        ),
        GgmlDType::Q6K => (
            Q6_K_BLOCK_BYTES,
            QK_K,
            &[208],
            QuantMatrix::from_ggml_q6_k_bytes as _,
        ),
        _ => return None,
    };
    Some(Ours {
        block_bytes,
        weights,
        f16_fields,
        repack,
    })
}

/// Our kernels' copy of a Q4_1, Q8_0, Q4_0, Q5_0, Q5_1 or Q2_K … Q6_K tensor (`[rows,
/// cols]`, repacked exactly into our layouts); None for other types, or
/// when `CANDLE_DEQUANTIZE_ALL` asks for candle's f32 path everywhere (the f32 oracle test).
/// `what` names the tensor in errors (`FILE: NAME`).
///
/// Errors: rows that are not whole blocks, a byte count that does not match, or a block
/// scale (or Q4_1 offset) that is not a finite number — a damaged file, refused at load
/// rather than turning every logit that reads the row into NaN later.
pub(super) fn quant_matrix(q: &QTensor, what: &str) -> Result<Option<QuantMatrix>> {
    if std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_some() {
        return Ok(None);
    }
    let Some(o) = ours(q.dtype()) else {
        return Ok(None);
    };
    let (rows, cols) = q.shape().dims2()?;
    let data = q.data()?;
    check_scales(&data, o.block_bytes, o.f16_fields, cols / o.weights, what)?;
    Ok(Some(
        (o.repack)(&data, rows, cols).with_context(|| what.to_string())?,
    ))
}

/// Every block's f16 fields at `offsets` (scale, offset) are finite. Errors name the tensor,
/// the row and the block.
fn check_scales(
    data: &[u8],
    block_bytes: usize,
    offsets: &[usize],
    blocks_per_row: usize,
    what: &str,
) -> Result<()> {
    for (i, b) in data.chunks_exact(block_bytes).enumerate() {
        for &o in offsets {
            let v = half::f16::from_bits(u16::from_le_bytes([b[o], b[o + 1]]));
            if !v.is_finite() {
                bail!(
                    "{what}: row {}, block {} holds a scale that is not a finite number ({v}): the file is damaged",
                    i / blocks_per_row.max(1),
                    i % blocks_per_row.max(1)
                );
            }
        }
    }
    Ok(())
}

/// The names of the weight matrices a decode step reads, in the GGUF's names: every layer's
/// `blk.N.{attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down}.weight`, then the
/// LM head (`output.weight`, or `token_embd.weight` when the embeddings are tied).
pub fn decoder_matrix_names(c: &ModelConfig) -> Vec<String> {
    let mut names = Vec::with_capacity(7 * c.num_hidden_layers + 1);
    for i in 0..c.num_hidden_layers {
        for m in [
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        ] {
            names.push(format!("blk.{i}.{m}.weight"));
        }
    }
    names.push(
        match c.tie_word_embeddings {
            true => "token_embd.weight",
            false => "output.weight",
        }
        .to_string(),
    );
    names
}

/// ggml's name of a tensor type (`Q4_K`, `Q8_0`, `F16`; candle spells the K-quants `Q4K`).
pub fn ggml_type_name(t: GgmlDType) -> String {
    let debug = format!("{t:?}");
    match debug.strip_suffix('K') {
        Some(stem) if stem.starts_with('Q') => format!("{stem}_K"),
        _ => debug,
    }
}

impl GgufFile {
    /// The decoder's matrices our kernels do not hold (their type has no kernel of ours,
    /// [`quant_matrix`]), with their types, from the header: they run on candle's generic
    /// kernels. Empty when `CANDLE_DEQUANTIZE_ALL` asks for candle everywhere (a test setting).
    pub fn generic_matrices(&self, c: &ModelConfig) -> Vec<(String, GgmlDType)> {
        if std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_some() {
            return Vec::new();
        }
        decoder_matrix_names(c)
            .into_iter()
            .filter_map(|name| {
                let info = self.content.tensor_infos.get(&name)?;
                let held = ours(info.ggml_dtype)
                    .is_some_and(|o| info.shape.dims().last().is_some_and(|c| c % o.weights == 0));
                (!held).then_some((name, info.ggml_dtype))
            })
            .collect()
    }
}

/// The one-line warning for a model whose `generic` matrices (of `total`) run on candle's
/// generic kernels, e.g. `30 of 211 weight matrices run on candle's generic kernels, not
/// ours: Q4_K ×16, Q6_K ×14 (first blk.0.ffn_down.weight) …`. None when there are none.
pub fn generic_warning(generic: &[(String, GgmlDType)], total: usize) -> Option<String> {
    let (first, _) = generic.first()?;
    let mut counts: Vec<(String, usize)> = Vec::new();
    for (_, t) in generic {
        let name = ggml_type_name(*t);
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, k)) => *k += 1,
            None => counts.push((name, 1)),
        }
    }
    let types: Vec<String> = counts.iter().map(|(n, k)| format!("{n} ×{k}")).collect();
    Some(format!(
        "{} of {total} weight matrices run on candle's generic kernels, not ours ({}; first {first}): decode is several times slower on them; Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q2_K … Q6_K run on ours",
        generic.len(),
        types.join(", ")
    ))
}

#[cfg(test)]
mod generic_tests {
    use super::*;

    #[test]
    fn the_warning_counts_types_in_ggml_s_names() {
        assert_eq!(ggml_type_name(GgmlDType::Q4K), "Q4_K");
        assert_eq!(ggml_type_name(GgmlDType::Q8K), "Q8_K");
        assert_eq!(ggml_type_name(GgmlDType::Q5_1), "Q5_1");
        assert_eq!(ggml_type_name(GgmlDType::F16), "F16");
        assert_eq!(generic_warning(&[], 211), None);
        let generic = [
            ("blk.0.ffn_down.weight".to_string(), GgmlDType::Q4K),
            ("blk.1.ffn_down.weight".to_string(), GgmlDType::Q6K),
            ("blk.2.ffn_down.weight".to_string(), GgmlDType::Q4K),
        ];
        let w = generic_warning(&generic, 211).unwrap_or_default();
        assert!(
            w.starts_with("3 of 211 weight matrices run on candle's generic kernels, not ours (Q4_K ×2, Q6_K ×1; first blk.0.ffn_down.weight)"),
            "{w}"
        );
    }
}
