//! Loading a GGUF file: metadata into [`ModelConfig`], tensors into [`DecoderWeights`].
//!
//! Source: the GGUF spec (ggml docs/gguf.md) and llama.cpp's tensor names
//! (`token_embd`, `blk.N.attn_q`, ..., `output_norm`, `output`).
use crate::kernels::gemm::DenseMatrix;
use crate::kernels::quant::QuantMatrix;
use crate::model::config::{Architecture, ModelConfig};
use crate::model::llama::{DecoderWeights, LayerWeights, Linear};
use anyhow::{bail, Context, Result};
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::Device;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

mod rope;
pub use rope::ROPE_FREQS;

/// An opened GGUF file whose header was read and checked against the file size.
pub struct GgufFile {
    /// Header: metadata and tensor infos.
    pub content: Content,
    reader: BufReader<File>,
    path: String,
    /// Keep an f32 copy of every matrix, packed for our prefill GEMM (see [`Linear::packed`]).
    pub dense_prefill: bool,
}

impl GgufFile {
    /// Open `path` and read its header (metadata and tensor table, not the weights).
    ///
    /// Errors: the file is missing or unreadable, is not GGUF (magic is not `GGUF`), its header
    /// is corrupt, or it is truncated (a tensor ends past the end of the file).
    pub fn open(path: &Path) -> Result<GgufFile> {
        let shown = path.display().to_string();
        let file = File::open(path).with_context(|| format!("cannot open model file {shown}"))?;
        let file_len = file
            .metadata()
            .with_context(|| format!("cannot read model file {shown}"))?
            .len();
        let mut reader = BufReader::new(file);
        let mut magic = [0u8; 4];
        if reader.read_exact(&mut magic).is_err() || &magic != b"GGUF" {
            bail!("{shown} is not a GGUF file (it does not start with the GGUF magic bytes)");
        }
        reader = BufReader::new(
            File::open(path).with_context(|| format!("cannot open model file {shown}"))?,
        );
        let content = Content::read(&mut reader)
            .map_err(|e| anyhow::anyhow!("{shown}: corrupt or truncated GGUF header ({e})"))?;
        for (name, info) in &content.tensor_infos {
            let elems = info.shape.elem_count() as u64;
            let block = info.ggml_dtype.block_size() as u64;
            let bytes = elems.div_ceil(block) * info.ggml_dtype.type_size() as u64;
            let end = content.tensor_data_offset + info.offset + bytes;
            if end > file_len {
                bail!(
                    "{shown} is truncated: tensor {name} ends at byte {end} but the file has {file_len} bytes"
                );
            }
        }
        Ok(GgufFile {
            content,
            reader,
            path: shown,
            dense_prefill: true,
        })
    }

    /// A metadata value. Errors: the key is absent.
    pub fn meta(&self, key: &str) -> Result<&Value> {
        self.content
            .metadata
            .get(key)
            .with_context(|| format!("{}: GGUF metadata has no key {key}", self.path))
    }

    /// A metadata value as u32. Errors: absent or not an integer.
    pub fn meta_u32(&self, key: &str) -> Result<u32> {
        let v = self.meta(key)?;
        v.to_u32()
            .or_else(|_| v.to_u64().map(|x| x as u32))
            .or_else(|_| v.to_i32().map(|x| x as u32))
            .map_err(|_| anyhow::anyhow!("{}: GGUF key {key} is not an integer", self.path))
    }

    /// A metadata value as f32. Errors: absent or not a float.
    pub fn meta_f32(&self, key: &str) -> Result<f32> {
        self.meta(key)?
            .to_f32()
            .map_err(|_| anyhow::anyhow!("{}: GGUF key {key} is not a float", self.path))
    }

    /// A metadata value as a string. Errors: absent or not a string.
    pub fn meta_str(&self, key: &str) -> Result<&str> {
        self.meta(key)?
            .to_string()
            .map(|s| s.as_str())
            .map_err(|_| anyhow::anyhow!("{}: GGUF key {key} is not a string", self.path))
    }

    /// The model's hyper-parameters from `general.architecture` and `{arch}.*` keys.
    ///
    /// RoPE: `{arch}.rope.freq_base`, and the scaling keys and `rope_freqs.weight` tensor
    /// (see `GgufFile::rope` in `gguf/rope.rs`).
    ///
    /// Errors: an architecture this engine does not run, a missing key, inconsistent numbers,
    /// RoPE settings this engine does not compute (named).
    pub fn config(&self) -> Result<ModelConfig> {
        let arch_name = self.meta_str("general.architecture")?.to_string();
        let architecture = Architecture::from_gguf(&arch_name).with_context(|| {
            format!(
                "{}: unsupported architecture {arch_name:?} (supported: {})",
                self.path,
                Architecture::GGUF_NAMES.join(", ")
            )
        })?;
        let k = |s: &str| format!("{arch_name}.{s}");
        let hidden_size = self.meta_u32(&k("embedding_length"))? as usize;
        let num_attention_heads = self.meta_u32(&k("attention.head_count"))? as usize;
        let num_key_value_heads = match self.meta_u32(&k("attention.head_count_kv")) {
            Ok(n) => n as usize,
            Err(_) => num_attention_heads,
        };
        if num_attention_heads == 0 {
            bail!("{}: {} is 0", self.path, k("attention.head_count"));
        }
        let head_dim = match self.meta_u32(&k("attention.key_length")) {
            Ok(n) => n as usize,
            Err(_) => hidden_size / num_attention_heads,
        };
        let vocab_size = match self.meta("tokenizer.ggml.tokens")?.to_vec() {
            Ok(v) => v.len(),
            Err(_) => bail!("{}: tokenizer.ggml.tokens is not an array", self.path),
        };
        let tie_word_embeddings = !self.content.tensor_infos.contains_key("output.weight");
        let max_position_embeddings = self.meta_u32(&k("context_length"))? as usize;
        let (rope_scaling, rope_freq_factors) =
            self.rope(&arch_name, head_dim, max_position_embeddings)?;
        let config = ModelConfig {
            architecture,
            vocab_size,
            hidden_size,
            intermediate_size: self.meta_u32(&k("feed_forward_length"))? as usize,
            num_hidden_layers: self.meta_u32(&k("block_count"))? as usize,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: self.meta_f32(&k("attention.layer_norm_rms_epsilon"))? as f64,
            rope_theta: self.meta_f32(&k("rope.freq_base")).unwrap_or(10_000.0) as f64,
            rope_scaling,
            rope_freq_factors,
            max_position_embeddings,
            tie_word_embeddings,
            rope_interleaved: matches!(architecture, Architecture::Llama | Architecture::Mistral),
            attention_bias: architecture == Architecture::Qwen2,
            qk_norm: architecture == Architecture::Qwen3,
        };
        config.validate().with_context(|| self.path.to_string())?;
        Ok(config)
    }

    /// Read one tensor. Errors: absent from the file, or unreadable.
    pub fn qtensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        let path = &self.path;
        self.content
            .tensor(&mut self.reader, name, device)
            .with_context(|| format!("{path}: cannot read tensor {name}"))
    }

    /// A one-dimensional tensor (norm weight, bias) of `len` values as f32.
    /// Errors: missing, or another length.
    fn vector(&mut self, name: &str, len: usize, device: &Device) -> Result<Vec<f32>> {
        let v: Vec<f32> = self
            .qtensor(name, device)?
            .dequantize(device)?
            .flatten_all()?
            .to_vec1()?;
        if v.len() != len {
            bail!(
                "{}: {name} has {} values, expected {len}",
                self.path,
                v.len()
            );
        }
        Ok(v)
    }

    /// The prefill copy of `q` when `dense_prefill`: the weight dequantized to f32 (from our
    /// repacked blocks when we have them, else by candle) and packed for our GEMM.
    fn packed(
        &self,
        q: &QTensor,
        quant: Option<&QuantMatrix>,
        device: &Device,
    ) -> Result<Option<DenseMatrix>> {
        if !self.dense_prefill {
            return Ok(None);
        }
        let (rows, cols) = q.shape().dims2()?;
        let values = match quant {
            Some(m) => m.dequantize(),
            None => q.dequantize(device)?.flatten_all()?.to_vec1()?,
        };
        Ok(Some(DenseMatrix::pack(&values, rows, cols)?))
    }

    fn linear(&mut self, name: &str, bias: bool, device: &Device) -> Result<Linear> {
        let q = self.qtensor(&format!("{name}.weight"), device)?;
        let quant = quant_matrix(&q)?;
        let packed = self.packed(&q, quant.as_ref(), device)?;
        let out = q.shape().dims2()?.0;
        let weight = QMatMul::from_qtensor(q)?;
        let bias = if bias {
            Some(self.vector(&format!("{name}.bias"), out, device)?)
        } else {
            None
        };
        Ok(Linear {
            weight,
            bias,
            dense: None,
            quant,
            packed,
        })
    }

    /// Read every tensor the decoder needs (quantized matrices stay quantized).
    ///
    /// Errors: a tensor is missing or has the wrong shape for `config`.
    pub fn weights(&mut self, config: &ModelConfig, device: &Device) -> Result<DecoderWeights> {
        let embed_q = self.qtensor("token_embd.weight", device)?;
        let embed_tokens = embed_q.dequantize(device)?;
        let expected = [config.vocab_size, config.hidden_size];
        if embed_tokens.dims() != expected {
            bail!(
                "{}: token_embd.weight has shape {:?}, expected {:?}",
                self.path,
                embed_tokens.dims(),
                expected
            );
        }
        let lm_head_q = if config.tie_word_embeddings {
            embed_q
        } else {
            self.qtensor("output.weight", device)?
        };
        let quant = quant_matrix(&lm_head_q)?;
        let lm_head = Linear {
            packed: self.packed(&lm_head_q, quant.as_ref(), device)?,
            weight: QMatMul::from_qtensor(lm_head_q)?,
            bias: None,
            dense: None,
            quant,
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        let (h, d) = (config.hidden_size, config.head_dim);
        for i in 0..config.num_hidden_layers {
            let p = format!("blk.{i}");
            let bias = config.attention_bias;
            layers.push(LayerWeights {
                q_proj: self.linear(&format!("{p}.attn_q"), bias, device)?,
                k_proj: self.linear(&format!("{p}.attn_k"), bias, device)?,
                v_proj: self.linear(&format!("{p}.attn_v"), bias, device)?,
                o_proj: self.linear(&format!("{p}.attn_output"), false, device)?,
                gate_proj: self.linear(&format!("{p}.ffn_gate"), false, device)?,
                up_proj: self.linear(&format!("{p}.ffn_up"), false, device)?,
                down_proj: self.linear(&format!("{p}.ffn_down"), false, device)?,
                input_layernorm: self.vector(&format!("{p}.attn_norm.weight"), h, device)?,
                post_attention_layernorm: self.vector(
                    &format!("{p}.ffn_norm.weight"),
                    h,
                    device,
                )?,
                q_norm: match config.qk_norm {
                    true => Some(self.vector(&format!("{p}.attn_q_norm.weight"), d, device)?),
                    false => None,
                },
                k_norm: match config.qk_norm {
                    true => Some(self.vector(&format!("{p}.attn_k_norm.weight"), d, device)?),
                    false => None,
                },
            });
        }
        Ok(DecoderWeights {
            embed_tokens,
            layers,
            norm: self.vector("output_norm.weight", h, device)?,
            lm_head,
        })
    }
}

/// Our kernels' copy of a Q4_1 or Q8_0 tensor (`[rows, cols]`); None for other types, or
/// when `CANDLE_DEQUANTIZE_ALL` asks for candle's f32 path everywhere (the f32 oracle test).
fn quant_matrix(q: &QTensor) -> Result<Option<QuantMatrix>> {
    if std::env::var_os("CANDLE_DEQUANTIZE_ALL").is_some() {
        return Ok(None);
    }
    let (rows, cols) = q.shape().dims2()?;
    Ok(match q.dtype() {
        GgmlDType::Q4_1 => Some(QuantMatrix::from_ggml_bytes(&q.data()?, rows, cols)?),
        GgmlDType::Q8_0 => Some(QuantMatrix::from_ggml_q8_0_bytes(&q.data()?, rows, cols)?),
        _ => None,
    })
}
