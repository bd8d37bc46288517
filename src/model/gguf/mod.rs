//! Loading a GGUF file: metadata into [`ModelConfig`], tensors into [`DecoderWeights`].
//!
//! Source: the GGUF spec (ggml docs/gguf.md) and llama.cpp's tensor names
//! (`token_embd`, `blk.N.attn_q`, ..., `output_norm`, `output`).
use crate::kernels::gemm::DenseMatrix;
use crate::model::arch::Blocks;
use crate::model::config::{Architecture, ModelConfig};
use crate::model::decoder::attention::{Attention, AttentionKind, Gqa};
use crate::model::decoder::ffn::{DenseFfn, FeedForward, FfnKind};
use crate::model::decoder::norm::Norms;
use crate::model::decoder::{DecoderWeights, LayerWeights};
use crate::model::embedding::Embedding;
use crate::model::finite::finite;
use crate::model::linear::Linear;
use anyhow::{bail, Context, Result};
use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{QMatMul, QTensor};
use candle_core::Device;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

mod config;
mod deepseek;
mod experts;
mod file;
pub mod foreign;
pub mod header;
mod matrices;
mod mla;
mod raw;
mod rope;

pub use file::GgufFile;
pub use header::RUNNABLE;
pub use matrices::{decoder_matrix_names, ggml_type_name};
pub use rope::ROPE_FREQS;

impl GgufFile {
    /// Open `path` and read its header (metadata and tensor table, not the weights).
    ///
    /// Errors: the file is missing or unreadable, is not GGUF (magic is not `GGUF`), its header
    /// is corrupt or breaks a rule llama.cpp's reader enforces (see `gguf/header.rs`: version,
    /// duplicate keys or tensors, alignment, tensor types and offsets), or it is truncated (a
    /// tensor ends past the end of the file).
    pub fn open(path: &Path) -> Result<GgufFile> {
        let shown = path.display().to_string();
        // Before opening: opening a pipe blocks until a writer comes, and a pipe or a device
        // cannot be mapped or read at the tensors' offsets.
        let is_file = std::fs::metadata(path).map(|m| m.is_file());
        if matches!(is_file, Ok(false)) {
            bail!("{shown} is not a regular file (a .gguf file or a model folder is expected)");
        }
        let file = File::open(path).with_context(|| format!("cannot open model file {shown}"))?;
        let file_len = file
            .metadata()
            .with_context(|| format!("cannot read model file {shown}"))?
            .len();
        let mut reader = BufReader::new(file);
        let header::Header { content, foreign } =
            header::read_header(&mut reader, file_len, &shown)?;
        let file = GgufFile {
            content,
            foreign,
            reader,
            map: None,
            path: shown,
            dense_prefill: true,
        };
        // MXFP4 tensors (`foreign`) too: the header's own check rounds the length up to the
        // alignment, so a file cut inside its last tensor's final padding passes it.
        for name in file.content.tensor_infos.keys().chain(file.foreign.keys()) {
            let end = file.span(name).map_or(0, |(at, len)| at + len);
            if end > file_len {
                bail!(
                    "{} is truncated: tensor {name} ends at byte {end} but the file has {file_len} bytes",
                    file.path
                );
            }
        }
        Ok(file)
    }

    /// A metadata value. Errors: the key is absent.
    pub fn meta(&self, key: &str) -> Result<&Value> {
        self.content
            .metadata
            .get(key)
            .with_context(|| format!("{}: GGUF metadata has no key {key}", self.path))
    }

    /// A metadata value as u32 (from any integer type). Errors: absent, not an integer, or
    /// outside 0 ..= 2^32 − 1 (named, never truncated).
    pub fn meta_u32(&self, key: &str) -> Result<u32> {
        let v = self.meta(key)?;
        let Some(n) = crate::sizing::spec::gguf::gguf_uint(v) else {
            let what = match v {
                Value::String(_) => "a string".to_string(),
                Value::Array(a) => format!("an array of {} values", a.len()),
                Value::Bool(_) => "a bool".to_string(),
                Value::F32(_) | Value::F64(_) => "a float".to_string(),
                _ => "negative".to_string(),
            };
            bail!(
                "{}: GGUF key {key} is {what}, expected an integer",
                self.path
            );
        };
        u32::try_from(n).map_err(|_| {
            anyhow::anyhow!(
                "{}: GGUF key {key} is {n}, outside 0 to 2^32 − 1",
                self.path
            )
        })
    }

    /// [`GgufFile::meta_u32`] of a key that may be absent (`None`); present, it must be a
    /// u32-range integer.
    pub fn meta_u32_opt(&self, key: &str) -> Result<Option<u32>> {
        match self.content.metadata.contains_key(key) {
            true => self.meta_u32(key).map(Some),
            false => Ok(None),
        }
    }

    /// A metadata value as a string. Errors: absent or not a string.
    pub fn meta_str(&self, key: &str) -> Result<&str> {
        self.meta(key)?
            .to_string()
            .map(|s| s.as_str())
            .map_err(|_| anyhow::anyhow!("{}: GGUF key {key} is not a string", self.path))
    }

    /// The dimensions of tensor `name` (candle's order), of any type; None when absent.
    pub fn dims_of(&self, name: &str) -> Option<Vec<usize>> {
        match (self.content.tensor_infos.get(name), self.foreign.get(name)) {
            (Some(info), _) => Some(info.shape.dims().to_vec()),
            (None, Some(t)) => Some(t.dims.clone()),
            (None, None) => None,
        }
    }

    /// Read one tensor. Errors: absent from the file (named), or unreadable.
    pub fn qtensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        let path = &self.path;
        if let Some(t) = self.foreign.get(name) {
            bail!(
                "{path}: tensor {name} is {}, which nanollm runs for projection and expert matrices only",
                t.ty.name()
            );
        }
        if !self.content.tensor_infos.contains_key(name) {
            bail!("{path}: tensor {name} is missing (the model's architecture needs it)");
        }
        self.content
            .tensor(&mut self.reader, name, device)
            .with_context(|| format!("{path}: cannot read tensor {name}"))
    }

    /// Check tensor `name`'s shape (candle's order: `[rows, columns]` for a matrix) against
    /// `expected`, from the header alone, before anything is read. An absent tensor passes
    /// (reading it then names it). Errors: another shape, as llama.cpp's "tensor has wrong
    /// shape".
    fn check_shape(&self, name: &str, expected: &[usize]) -> Result<()> {
        let Some(dims) = self.dims_of(name) else {
            return Ok(());
        };
        if dims != expected {
            let what = match expected.len() {
                1 => "values",
                _ => "rows × columns",
            };
            bail!(
                "{}: tensor {name} has shape {dims:?}, expected {expected:?} ({what}, from the model's metadata)",
                self.path
            );
        }
        Ok(())
    }

    /// A one-dimensional tensor (norm weight, bias) of `len` values as f32.
    /// Errors: missing, or another shape.
    fn vector(&mut self, name: &str, len: usize, device: &Device) -> Result<Vec<f32>> {
        self.check_shape(name, &[len])?;
        self.vector_any(name, len, device)
    }

    /// Tensor `name` of any shape as its `len` f32 values, row-major (the caller checked the
    /// shape). Errors: missing, or another number of values.
    pub(super) fn vector_any(
        &mut self,
        name: &str,
        len: usize,
        device: &Device,
    ) -> Result<Vec<f32>> {
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
        finite(&self.path, name, v)
    }

    /// The prefill copy of a `[rows, cols]` matrix when `dense_prefill`: its f32 `values`
    /// (from our repacked blocks, or candle's dequantization) packed for our GEMM.
    fn packed(
        &self,
        (rows, cols): (usize, usize),
        values: impl FnOnce() -> Result<Vec<f32>>,
    ) -> Result<Option<DenseMatrix>> {
        match self.dense_prefill {
            true => Ok(Some(DenseMatrix::pack(&values()?, rows, cols)?)),
            false => Ok(None),
        }
    }

    /// The matrix `{name}.weight` of `[rows, cols]` (and its bias of `rows`, with `bias`).
    /// Errors: missing, or another shape.
    fn linear(
        &mut self,
        name: &str,
        (rows, cols): (usize, usize),
        bias: bool,
        device: &Device,
    ) -> Result<Linear> {
        self.check_shape(&format!("{name}.weight"), &[rows, cols])?;
        let bias = match bias {
            true => Some(self.vector(&format!("{name}.bias"), rows, device)?),
            false => None,
        };
        if let Some(m) = self.our_matrix(&format!("{name}.weight"), (rows, cols))? {
            let packed = self.packed((rows, cols), || Ok(m.dequantize()))?;
            return Ok(Linear {
                packed,
                ..Linear::on_kernels(m, bias)
            });
        }
        // candle's f32 path (CANDLE_DEQUANTIZE_ALL).
        let q = self.qtensor(&format!("{name}.weight"), device)?;
        let packed = self.packed((rows, cols), || dequantized(&q, device))?;
        Ok(Linear {
            weight: Some(QMatMul::from_qtensor(q)?),
            bias,
            dense: None,
            quant: None,
            packed,
        })
    }

    /// Read every tensor the decoder needs (quantized matrices stay quantized).
    ///
    /// Errors: a tensor is missing or has the wrong shape for `config`.
    pub fn weights(&mut self, config: &ModelConfig, device: &Device) -> Result<DecoderWeights> {
        if self.content.tensor_infos.is_empty() {
            bail!(
                "{} holds no tensors (a vocabulary-only GGUF, as llama.cpp's ggml-vocab-* test files?): give a model with weights",
                self.path
            );
        }
        let (h, d) = (config.hidden_size, config.head_dim);
        let embed_shape = [config.vocab_size, h];
        self.check_shape("token_embd.weight", &embed_shape)?;
        if !config.tie_word_embeddings {
            self.check_shape("output.weight", &embed_shape)?;
        }
        let vocab = (config.vocab_size, h);
        let head = match config.tie_word_embeddings {
            true => "token_embd.weight",
            false => "output.weight",
        };
        // The embedding stays in our kernels' blocks where they hold its type (one copy with
        // a tied LM head), else f32 (model::embedding).
        let embed_tokens = match config.tie_word_embeddings {
            true => None,
            false => Some(match self.our_matrix("token_embd.weight", vocab)? {
                Some(m) => Embedding::Quantized(m),
                None => Embedding::Dense(
                    self.qtensor("token_embd.weight", device)?
                        .dequantize(device)?,
                ),
            }),
        };
        let quant = self.our_matrix(head, vocab)?;
        let (packed, weight) = match &quant {
            Some(m) => (self.packed(vocab, || Ok(m.dequantize()))?, None),
            None => {
                let q = self.qtensor(head, device)?;
                (self.packed(vocab, || dequantized(&q, device))?, Some(q))
            }
        };
        let embed_tokens = match (embed_tokens, &weight) {
            (Some(e), _) => e,
            (None, None) => Embedding::TiedLmHead,
            (None, Some(q)) => Embedding::Dense(q.dequantize(device)?),
        };
        let lm_head = Linear {
            packed,
            weight: weight.map(QMatMul::from_qtensor).transpose()?,
            bias: None,
            dense: None,
            quant,
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        let (q, kv) = (
            config.num_attention_heads * d,
            config.num_key_value_heads * d,
        );
        let ffn = config.intermediate_size;
        let blocks = Blocks::of(config.architecture);
        for i in 0..config.num_hidden_layers {
            let p = format!("blk.{i}");
            let bias = config.attention_bias;
            let sinks = config.attention_sinks;
            let vector = |file: &mut Self, name: &str, len: usize| {
                file.vector(&format!("{p}.{name}.weight"), len, device)
            };
            let attention = match blocks.attention {
                AttentionKind::Gqa => Attention::Gqa(Gqa {
                    q_proj: self.linear(&format!("{p}.attn_q"), (q, h), bias, device)?,
                    k_proj: self.linear(&format!("{p}.attn_k"), (kv, h), bias, device)?,
                    v_proj: self.linear(&format!("{p}.attn_v"), (kv, h), bias, device)?,
                    // gpt-oss biases its output projection too.
                    o_proj: self.linear(&format!("{p}.attn_output"), (h, q), sinks, device)?,
                    q_norm: match config.qk_norm {
                        true => Some(vector(self, "attn_q_norm", d)?),
                        false => None,
                    },
                    k_norm: match config.qk_norm {
                        true => Some(vector(self, "attn_k_norm", d)?),
                        false => None,
                    },
                    sinks: match sinks {
                        true => Some(vector(self, "attn_sinks", config.num_attention_heads)?),
                        false => None,
                    },
                }),
                AttentionKind::Mla => Attention::Mla(self.mla_block(&p, config, device)?),
            };
            // DeepSeek's first `first_k_dense_replace` layers are dense.
            let dense_layer = config.moe.is_some_and(|m| !m.is_moe_layer(i));
            let ffn = match blocks.ffn {
                FfnKind::Moe if !dense_layer => {
                    FeedForward::Moe(self.moe_block(&p, config, device)?)
                }
                FfnKind::Dense | FfnKind::Moe => FeedForward::Dense(DenseFfn {
                    gate_proj: self.linear(&format!("{p}.ffn_gate"), (ffn, h), false, device)?,
                    up_proj: self.linear(&format!("{p}.ffn_up"), (ffn, h), false, device)?,
                    down_proj: self.linear(&format!("{p}.ffn_down"), (h, ffn), false, device)?,
                }),
            };
            // The GGUF converter stored Gemma's norms as 1 + w already.
            let norms = Norms {
                attn_in: vector(self, "attn_norm", h)?,
                // gpt-oss's converter names the FFN's pre-norm `post_attention_norm`.
                ffn_in: match config.architecture {
                    Architecture::GptOss => vector(self, "post_attention_norm", h)?,
                    _ => vector(self, "ffn_norm", h)?,
                },
                attn_out: match config.post_norms {
                    true => Some(vector(self, "post_attention_norm", h)?),
                    false => None,
                },
                ffn_out: match config.post_norms {
                    true => Some(vector(self, "post_ffw_norm", h)?),
                    false => None,
                },
            };
            layers.push(LayerWeights {
                norms,
                attention,
                ffn,
            });
        }
        let norm = self.vector("output_norm.weight", h, device)?;
        self.map = None;
        Ok(DecoderWeights {
            embed_tokens,
            layers,
            norm,
            lm_head,
        })
    }
}

/// candle's f32 values of `q`, row-major.
fn dequantized(q: &QTensor, device: &Device) -> Result<Vec<f32>> {
    Ok(q.dequantize(device)?.flatten_all()?.to_vec1()?)
}
