//! A GGUF's matrices on our kernels: the one list of types they run ([`ours`]), the repack
//! at load with its scale check ([`GgufFile::our_matrices`]), the decoder's matrix names, and the
//! refusal, from the header, of a model with a matrix of another type
//! ([`GgufFile::check_types`]).
use super::file::GgufFile;
use super::header::{ForeignType, RUNNABLE};
use crate::kernels::matmul::float::{F32_BLOCK_BYTES, H16_BLOCK_BYTES};
use crate::kernels::matmul::{
    first_block, QuantMatrix, Q2_K_BLOCK_BYTES, Q3_K_BLOCK_BYTES, Q4_0_BLOCK_BYTES,
    Q4_1_BLOCK_BYTES, Q4_K_BLOCK_BYTES, Q5_0_BLOCK_BYTES, Q5_1_BLOCK_BYTES, Q5_K_BLOCK_BYTES,
    Q6_K_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK, QK_K,
};
use crate::model::config::ModelConfig;
use anyhow::{bail, Context, Result};
use candle_core::quantized::GgmlDType;

/// How our kernels take a ggml type: its block's bytes and weights, the offsets of its f16
/// scale fields (scales, minima, Q4_1's offset), and the constructor that repacks it.
struct Ours {
    block_bytes: usize,
    weights: usize,
    f16_fields: &'static [usize],
    repack: fn(&[u8], usize, usize) -> Result<QuantMatrix>,
}

/// How our kernels take ggml type `t`; None for the types they do not run (refused at
/// load, [`GgufFile::check_types`]). The one list of "ours".
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
        // Unquantized: every value's finiteness is checked by the repack itself.
        GgmlDType::F16 => (
            H16_BLOCK_BYTES,
            QK,
            &[],
            QuantMatrix::from_ggml_f16_bytes as _,
        ),
        GgmlDType::BF16 => (
            H16_BLOCK_BYTES,
            QK,
            &[],
            QuantMatrix::from_ggml_bf16_bytes as _,
        ),
        GgmlDType::F32 => (
            F32_BLOCK_BYTES,
            QK,
            &[],
            QuantMatrix::from_ggml_f32_bytes as _,
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

/// How a tensor's bytes become our kernels' matrices: a ggml type candle knows ([`ours`]),
/// or MXFP4, which it does not ([`ForeignType`]).
enum Repack {
    Ggml(Ours),
    Mxfp4,
}

impl GgufFile {
    /// Our kernels' copy of matrix `name`, `[rows, cols]` (the caller checked the shape), as
    /// [`GgufFile::our_matrices`] makes one.
    pub(super) fn our_matrix(
        &mut self,
        name: &str,
        dims: (usize, usize),
    ) -> Result<Option<QuantMatrix>> {
        Ok(self
            .our_matrices(name, 1, dims)?
            .and_then(|m| m.into_iter().next()))
    }

    /// Our kernels' copies of the `count` matrices `[rows, cols]` that tensor `name` holds one
    /// after the other (`count` 1, or a GGUF's `[experts, rows, cols]` expert tensor), each
    /// repacked exactly from its slice of the file's bytes into our layouts, for the types
    /// they run ([`ours`]: Q4_0 … Q8_0, the K-quants, F16/BF16/F32, and MXFP4). None when
    /// `CANDLE_DEQUANTIZE_ALL` asks for candle's f32 path (the f32 oracle test), except for
    /// MXFP4, which candle cannot read. Errors name the tensor (`FILE: NAME`, an expert's as
    /// `FILE: NAME, expert E`): missing; a type our kernels do not run (named, with the ones
    /// they do); rows that are not whole blocks or a byte count that does not match; a block
    /// scale (or Q4_1 offset, or F16/BF16/F32 weight, or MXFP4's E8M0 255) that is not a
    /// finite number — a damaged file, refused at load rather than turning every logit that
    /// reads the row into NaN later.
    pub(super) fn our_matrices(
        &mut self,
        name: &str,
        count: usize,
        (rows, cols): (usize, usize),
    ) -> Result<Option<Vec<QuantMatrix>>> {
        let what = format!("{}: {name}", self.path);
        let how = match (self.foreign.get(name), self.content.tensor_infos.get(name)) {
            (Some(t), _) => match t.ty {
                ForeignType::Mxfp4 => Repack::Mxfp4,
            },
            (None, Some(_)) if std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_some() => {
                return Ok(None)
            }
            (None, Some(info)) => match ours(info.ggml_dtype) {
                Some(o) => Repack::Ggml(o),
                None => bail!("{what}: {}", unrunnable(info.ggml_dtype)),
            },
            (None, None) => {
                bail!("{what} is missing (the model's architecture needs it)")
            }
        };
        let bytes = self.raw(name)?;
        let per = bytes.len() / count.max(1);
        if per * count != bytes.len() {
            bail!(
                "{what}: {} bytes do not split into {count} experts",
                bytes.len()
            );
        }
        let matrices = (0..count)
            .map(|e| {
                let part = &bytes[e * per..(e + 1) * per];
                let what = match count {
                    1 => what.clone(),
                    _ => format!("{what}, expert {e}"),
                };
                match &how {
                    Repack::Ggml(o) => repack(o, part, (rows, cols), &what),
                    Repack::Mxfp4 => {
                        QuantMatrix::from_file_mxfp4_bytes(part, rows, cols).context(what)
                    }
                }
            })
            .collect::<Result<Vec<_>>>();
        self.release(name);
        matrices.map(Some)
    }
}

/// One matrix `[rows, cols]` from its ggml bytes: the scales checked, then repacked.
fn repack(o: &Ours, bytes: &[u8], (rows, cols): (usize, usize), what: &str) -> Result<QuantMatrix> {
    check_scales(bytes, o.block_bytes, o.f16_fields, cols / o.weights, what)?;
    (o.repack)(bytes, rows, cols).with_context(|| what.to_string())
}

/// Why a matrix of type `t` is refused: "the tensor type Q8_1 is not one nanollm's kernels
/// run (…)".
fn unrunnable(t: GgmlDType) -> String {
    format!(
        "the tensor type {} is not one nanollm's kernels run ({RUNNABLE}); requantize the file with llama.cpp's `llama-quantize`",
        ggml_type_name(t)
    )
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
    let field = |b: &[u8], o: usize| half::f16::from_bits(u16::from_le_bytes([b[o], b[o + 1]]));
    let bad = first_block(data, block_bytes, |b| {
        offsets.iter().any(|&o| !field(b, o).is_finite())
    });
    if let Some(i) = bad {
        let b = &data[i * block_bytes..][..block_bytes];
        let v = offsets
            .iter()
            .map(|&o| field(b, o))
            .find(|v| !v.is_finite());
        bail!(
            "{what}: row {}, block {} holds a scale that is not a finite number ({}): the file is damaged",
            i / blocks_per_row.max(1),
            i % blocks_per_row.max(1),
            v.unwrap_or(half::f16::NAN)
        );
    }
    Ok(())
}

/// The names of the weight matrices a decode step reads, in the GGUF's names: every layer's
/// `blk.N.{attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down}.weight`, then the
/// LM head (`output.weight`, or `token_embd.weight` when the embeddings are tied).
///
/// A mixture of experts reads, in place of the three FFN matrices, the router and the
/// expert tensors: `ffn_gate_inp`, `ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps`, and
/// DeepSeek's shared experts `ffn_{gate,up,down}_shexp` (its leading dense layers read the
/// three FFN matrices). MLA reads `attn_q` (or `attn_q_a`, `attn_q_b`), `attn_kv_a_mqa`,
/// `attn_k_b`, `attn_v_b` and `attn_output` in place of Q, K, V and O.
pub fn decoder_matrix_names(c: &ModelConfig) -> Vec<String> {
    let mut names = Vec::with_capacity(8 * c.num_hidden_layers + 1);
    // MLA (deepseek2): the query's matrices, kv_a, the latent's split up-maps (an older
    // file's fused `attn_kv_b` in their place: `gguf_weight_bytes` reads either).
    let attention: &[&str] = match c.mla {
        Some(m) if m.q_lora_rank.is_some() => &[
            "attn_q_a",
            "attn_q_b",
            "attn_kv_a_mqa",
            "attn_k_b",
            "attn_v_b",
            "attn_output",
        ],
        Some(_) => &[
            "attn_q",
            "attn_kv_a_mqa",
            "attn_k_b",
            "attn_v_b",
            "attn_output",
        ],
        None => &["attn_q", "attn_k", "attn_v", "attn_output"],
    };
    let dense: &[&str] = &["ffn_gate", "ffn_up", "ffn_down"];
    for i in 0..c.num_hidden_layers {
        let ffn: &[&str] = match c.moe {
            Some(m) if m.is_moe_layer(i) && m.num_shared_experts > 0 => &[
                "ffn_gate_inp",
                "ffn_gate_exps",
                "ffn_up_exps",
                "ffn_down_exps",
                "ffn_gate_shexp",
                "ffn_up_shexp",
                "ffn_down_shexp",
            ],
            Some(m) if m.is_moe_layer(i) => &[
                "ffn_gate_inp",
                "ffn_gate_exps",
                "ffn_up_exps",
                "ffn_down_exps",
            ],
            _ => dense,
        };
        for m in attention.iter().chain(ffn) {
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
    /// Refuse, from the header alone (before any weight is read), a model whose decoder
    /// matrices or token embedding are of a type our kernels do not run, naming the first
    /// such tensor and its type. Nothing is refused when `CANDLE_DEQUANTIZE_ALL` asks for
    /// candle's path everywhere (a test setting).
    ///
    /// Errors: "FILE: blk.0.attn_q.weight: the tensor type Q8_1 is not one nanollm's
    /// kernels run (F32, F16, …)".
    pub fn check_types(&self, c: &ModelConfig) -> Result<()> {
        if std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_some() {
            return Ok(());
        }
        let mut names = decoder_matrix_names(c);
        names.push("token_embd.weight".to_string());
        for name in names {
            let Some(info) = self.content.tensor_infos.get(&name) else {
                continue;
            };
            if ours(info.ggml_dtype).is_none() {
                bail!("{}: {name}: {}", self.path, unrunnable(info.ggml_dtype));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod type_tests {
    use super::*;

    #[test]
    fn types_have_ggml_s_names_and_the_refusal_lists_ours() {
        assert_eq!(ggml_type_name(GgmlDType::Q4K), "Q4_K");
        assert_eq!(ggml_type_name(GgmlDType::Q8K), "Q8_K");
        assert_eq!(ggml_type_name(GgmlDType::Q5_1), "Q5_1");
        assert_eq!(ggml_type_name(GgmlDType::F16), "F16");
        for t in RUNNABLE.split(", ") {
            let dtype = [
                GgmlDType::F32,
                GgmlDType::F16,
                GgmlDType::BF16,
                GgmlDType::Q4_0,
                GgmlDType::Q4_1,
                GgmlDType::Q5_0,
                GgmlDType::Q5_1,
                GgmlDType::Q8_0,
                GgmlDType::Q2K,
                GgmlDType::Q3K,
                GgmlDType::Q4K,
                GgmlDType::Q5K,
                GgmlDType::Q6K,
            ]
            .into_iter()
            .find(|d| ggml_type_name(*d) == t);
            // MXFP4 is no candle type: the header reader keeps it aside (ForeignType).
            if t == crate::model::gguf::header::ForeignType::Mxfp4.name() {
                continue;
            }
            assert!(
                dtype.is_some_and(|d| ours(d).is_some()),
                "{t} is listed but not ours"
            );
        }
        assert!(ours(GgmlDType::Q8_1).is_none() && ours(GgmlDType::Q8K).is_none());
        assert!(unrunnable(GgmlDType::Q8_1).starts_with("the tensor type Q8_1 is not one"));
    }
}
