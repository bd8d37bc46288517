//! Loading a Hugging Face checkpoint (`model.safetensors`, or shards listed in
//! `model.safetensors.index.json`) into [`DecoderWeights`].
//!
//! Tensor names are transformers' (`model.embed_tokens.weight`,
//! `model.layers.N.self_attn.q_proj.weight`, ..., `model.norm.weight`, `lm_head.weight`).
//! Weights stored as f32, f16 or bf16 are converted to f32 at load (exact: both half types
//! are subsets of f32), and the decoder computes in f32, as its attention kernel and KV cache
//! do. Memory: 4 bytes per parameter, twice a bf16 checkpoint's size on disk.
use crate::model::arch::Blocks;
use crate::model::config::{Architecture, ModelConfig};
use crate::model::decoder::attention::{Attention, AttentionKind, Gqa};
use crate::model::decoder::ffn::{DenseFfn, FeedForward, FfnKind};
use crate::model::decoder::norm::Norms;
use crate::model::decoder::{DecoderWeights, LayerWeights};
use crate::model::embedding::Embedding;
use crate::model::finite::finite;
use crate::model::linear::Linear;
use crate::model::quantize_at_load::{self, InSituLoad};
use anyhow::{anyhow, bail, Context, Result};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

mod dtype;
mod experts;
pub mod header;
mod mla;
mod mxfp4;

pub use dtype::WeightDtype;

/// The safetensors files of one checkpoint, memory-mapped, headers read.
pub struct Checkpoint {
    tensors: MmapedSafetensors,
    /// The files, for messages.
    pub files: Vec<PathBuf>,
    dir: String,
}

impl Checkpoint {
    /// Open the checkpoint in `dir`: the shards named by `model.safetensors.index.json`
    /// (`weight_map`), else `model.safetensors`.
    ///
    /// Errors: neither file exists, the index is not valid JSON or names a missing shard, a
    /// file is not safetensors; the message names the file.
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        let index = dir.join("model.safetensors.index.json");
        let files = if index.is_file() {
            shards(&index)?
        } else if dir.join("model.safetensors").is_file() {
            vec![dir.join("model.safetensors")]
        } else {
            bail!(
                "{}: no model.safetensors and no model.safetensors.index.json (a Hugging Face model folder holds config.json, the safetensors weights and tokenizer.json)",
                dir.display()
            );
        };
        for file in &files {
            let shown = file.display().to_string();
            let mut f =
                std::fs::File::open(file).with_context(|| format!("{shown}: cannot open"))?;
            let len = f
                .metadata()
                .with_context(|| format!("{shown}: cannot read"))?
                .len();
            header::check_header(&mut f, len, &shown)?;
        }
        // SAFETY: the files are mapped read-only; as with every mmap-based loader (candle,
        // safetensors), the mapping assumes no other process truncates or rewrites them while
        // the model loads. Tensors are copied out of the mapping before it is dropped.
        let tensors = unsafe { MmapedSafetensors::multi(&files) }
            .map_err(|e| anyhow!("{}: cannot read the safetensors files ({e})", dir.display()))?;
        Ok(Checkpoint {
            tensors,
            files,
            dir: dir.display().to_string(),
        })
    }

    /// True when the checkpoint holds a tensor called `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.get(name).is_ok()
    }

    /// Tensor `name` as f32, checked to have `shape`.
    ///
    /// Errors: absent, stored in another dtype than f32/f16/bf16 (quantized checkpoints), or
    /// of another shape.
    pub fn f32(&self, name: &str, shape: &[usize], device: &Device) -> Result<Tensor> {
        if !self.contains(name) {
            bail!("{}: the checkpoint has no tensor {name}", self.dir);
        }
        let t = self
            .tensors
            .load(name, device)
            .map_err(|e| anyhow!("{}: cannot read tensor {name} ({e})", self.dir))?;
        if !matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16) {
            bail!(
                "{}: tensor {name} is stored as {:?}; only f32, f16 and bf16 checkpoints are supported",
                self.dir,
                t.dtype()
            );
        }
        if t.dims() != shape {
            bail!(
                "{}: tensor {name} has shape {:?}, expected {shape:?}",
                self.dir,
                t.dims()
            );
        }
        Ok(t.to_dtype(DType::F32)?)
    }

    /// A one-dimensional tensor (norm weight, bias, sinks) of `len` values, as f32.
    /// Errors: as [`Self::f32`], or a value that is not finite (named).
    fn vector(&self, name: &str, len: usize, device: &Device) -> Result<Vec<f32>> {
        let v = self.f32(name, &[len], device)?.to_vec1()?;
        finite(&self.dir, name, v)
    }

    /// A linear layer `prefix.weight` of shape `[out, inp]`, with `prefix.bias` (`[out]`) when
    /// `bias` is `Some(true)` (required), or when `None` and the checkpoint has one;
    /// `Some(false)`: no bias, whatever the checkpoint holds.
    fn linear(
        &self,
        prefix: &str,
        (out, inp): (usize, usize),
        bias: Option<bool>,
        device: &Device,
        quantize: Quantize,
    ) -> Result<Linear> {
        let w = self.f32(&format!("{prefix}.weight"), &[out, inp], device)?;
        let bias_name = format!("{prefix}.bias");
        let bias = match bias {
            Some(true) => Some(self.vector(&bias_name, out, device)?),
            None if self.contains(&bias_name) => Some(self.vector(&bias_name, out, device)?),
            _ => None,
        };
        self.finish_linear(&format!("{prefix}.weight"), w, bias, quantize)
    }

    /// A linear layer over the f32 matrix `w` (`[out, in]`, called `name` in messages) and
    /// its bias: quantized under `quantize`, else f32.
    fn finish_linear(
        &self,
        name: &str,
        w: Tensor,
        bias: Option<Vec<f32>>,
        quantize: Quantize,
    ) -> Result<Linear> {
        match quantize {
            Some((t, fallbacks)) => {
                quantize_at_load::linear(name, w, bias, t, &mut fallbacks.borrow_mut())
            }
            None => Ok(Linear::dense_f32(w, bias)),
        }
    }

    /// Read every tensor the decoder needs for `config`.
    ///
    /// Errors: a missing tensor or a shape that does not match `config` (named).
    pub fn weights(&self, config: &ModelConfig, device: &Device) -> Result<DecoderWeights> {
        Ok(self.weights_with(config, device, None)?.0)
    }

    /// [`Self::weights`], each matrix quantized under `quantize` (`--quantize`,
    /// [`quantize_at_load`]) when given; also the names of the matrices that took a fallback type or
    /// stayed f32 (their rows are not whole blocks of the type), e.g. `model.layers.0.mlp.down_proj.weight (Q5_0)`.
    ///
    /// Errors: as [`Self::weights`].
    pub fn weights_with(
        &self,
        config: &ModelConfig,
        device: &Device,
        quantize: Option<InSituLoad>,
    ) -> Result<(DecoderWeights, Vec<String>)> {
        let fallbacks = std::cell::RefCell::new(Vec::new());
        let q = quantize.map(|t| (t, &fallbacks));
        let c = config;
        // Layers past num_hidden_layers: config.json and the checkpoint disagree (vLLM
        // refuses weights it has no layer for).
        let past = self.tensors.tensors().into_iter().find_map(|(name, _)| {
            let i = name
                .strip_prefix("model.layers.")?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()?;
            (i >= c.num_hidden_layers).then_some(name)
        });
        if let Some(name) = past {
            bail!(
                "{}: tensor {name} is past config.json num_hidden_layers {} (the checkpoint's layers and config.json disagree)",
                self.dir,
                c.num_hidden_layers
            );
        }
        let (h, d) = (c.hidden_size, c.head_dim);
        let (q_out, kv_out) = (c.num_attention_heads * d, c.num_key_value_heads * d);
        let embed_tokens = self.f32("model.embed_tokens.weight", &[c.vocab_size, h], device)?;
        let lm_head = if c.tie_word_embeddings {
            match q {
                Some((t, f)) => quantize_at_load::output_linear(
                    "model.embed_tokens.weight",
                    embed_tokens.clone(),
                    None,
                    t,
                    &mut f.borrow_mut(),
                )?,
                None => Linear::dense_f32(embed_tokens.clone(), None),
            }
        } else if self.contains("lm_head.weight") {
            let w = self.f32("lm_head.weight", &[c.vocab_size, h], device)?;
            match q {
                Some((t, f)) => quantize_at_load::output_linear(
                    "lm_head.weight",
                    w,
                    None,
                    t,
                    &mut f.borrow_mut(),
                )?,
                None => Linear::dense_f32(w, None),
            }
        } else {
            bail!("{}: the checkpoint has no tensor lm_head.weight and config.json does not set tie_word_embeddings", self.dir);
        };
        // Biases as transformers builds the layers: Q, K, V by `attention_bias` (always for
        // Qwen2), the output projection by `attention_bias` too except Qwen2's (none), the MLP
        // by Llama's `mlp_bias`. A bias tensor the config does not call for is not used
        // (transformers ignores it too).
        let qkv_bias = Some(c.attention_bias);
        let o_bias = Some(c.attention_bias && c.architecture != Architecture::Qwen2);
        let mlp_bias = Some(c.mlp_bias);
        let gemma = c.architecture == Architecture::Gemma3;
        let blocks = Blocks::of(c.architecture);
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let lin = |name: &str, shape, bias| {
                self.linear(&format!("{p}.{name}"), shape, bias, device, q)
            };
            // Gemma stores its RMSNorm weights as w and scales by 1 + w (the GGUF converter
            // adds the 1; here it is added on load, in f32 as transformers does).
            let norm = |name: &str, n: usize| {
                let mut w = self.vector(&format!("{p}.{name}.weight"), n, device)?;
                if gemma {
                    w.iter_mut().for_each(|v| *v += 1.0);
                }
                Ok::<_, anyhow::Error>(w)
            };
            let post_norm = |name: &str| match c.post_norms {
                true => norm(name, h).map(Some),
                false => Ok(None),
            };
            // Gemma's pre-MLP norm is `pre_feedforward_layernorm`; its
            // `post_attention_layernorm` is the attention output's norm.
            let (pre_mlp, attn_out, ffn_out) = match gemma {
                true => (
                    "pre_feedforward_layernorm",
                    post_norm("post_attention_layernorm")?,
                    post_norm("post_feedforward_layernorm")?,
                ),
                false => ("post_attention_layernorm", None, None),
            };
            let attention = match blocks.attention {
                AttentionKind::Gqa => Attention::Gqa(Gqa {
                    q_proj: lin("self_attn.q_proj", (q_out, h), qkv_bias)?,
                    k_proj: lin("self_attn.k_proj", (kv_out, h), qkv_bias)?,
                    v_proj: lin("self_attn.v_proj", (kv_out, h), qkv_bias)?,
                    o_proj: lin("self_attn.o_proj", (h, q_out), o_bias)?,
                    q_norm: match c.qk_norm {
                        true => Some(norm("self_attn.q_norm", d)?),
                        false => None,
                    },
                    k_norm: match c.qk_norm {
                        true => Some(norm("self_attn.k_norm", d)?),
                        false => None,
                    },
                    sinks: match c.attention_sinks {
                        true => Some(self.vector(
                            &format!("{p}.self_attn.sinks"),
                            c.num_attention_heads,
                            device,
                        )?),
                        false => None,
                    },
                }),
                AttentionKind::Mla => Attention::Mla(self.mla_block(&p, c, device, q)?),
            };
            // DeepSeek's first `first_k_dense_replace` layers are dense.
            let dense_layer = c.moe.is_some_and(|m| !m.is_moe_layer(i));
            let ffn = match blocks.ffn {
                FfnKind::Moe if !dense_layer => FeedForward::Moe(self.moe_block(&p, c, device, q)?),
                FfnKind::Dense | FfnKind::Moe => FeedForward::Dense(DenseFfn {
                    gate_proj: lin("mlp.gate_proj", (c.intermediate_size, h), mlp_bias)?,
                    up_proj: lin("mlp.up_proj", (c.intermediate_size, h), mlp_bias)?,
                    down_proj: lin("mlp.down_proj", (h, c.intermediate_size), mlp_bias)?,
                }),
            };
            let norms = Norms {
                attn_in: norm("input_layernorm", h)?,
                ffn_in: norm(pre_mlp, h)?,
                attn_out,
                ffn_out,
            };
            layers.push(LayerWeights {
                norms,
                attention,
                ffn,
            });
        }
        // Quantized, the embedding is kept once: the tied LM head's blocks, or its own.
        let embed_tokens = match q {
            Some(_) if c.tie_word_embeddings && lm_head.quant.is_some() => Embedding::TiedLmHead,
            Some((load, _)) if !c.tie_word_embeddings => {
                match quantize_at_load::target(load.t, h) {
                    Some(to) => {
                        Embedding::Quantized(quantize_at_load::quantize(&embed_tokens, to)?)
                    }
                    None => Embedding::Dense(embed_tokens),
                }
            }
            _ => Embedding::Dense(embed_tokens),
        };
        let weights = DecoderWeights {
            embed_tokens,
            layers,
            norm: {
                let mut w = self.vector("model.norm.weight", h, device)?;
                if gemma {
                    w.iter_mut().for_each(|v| *v += 1.0);
                }
                w
            },
            lm_head,
        };
        Ok((weights, fallbacks.into_inner()))
    }
}

/// `--quantize`'s type and the list of matrices that fell back, as [`Checkpoint::linear`]
/// takes them (None: f32).
pub(super) type Quantize<'a> = Option<(InSituLoad, &'a std::cell::RefCell<Vec<String>>)>;

/// The shard files `weight_map` of `index` names, in order, each once.
fn shards(index: &Path) -> Result<Vec<PathBuf>> {
    let shown = index.display();
    let text = std::fs::read_to_string(index).with_context(|| format!("{shown}: cannot read"))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| anyhow!("{shown}: not valid JSON ({e})"))?;
    let map = value
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| anyhow!("{shown}: no weight_map object"))?;
    let names: BTreeSet<&str> = map.values().filter_map(Value::as_str).collect();
    if names.is_empty() {
        bail!("{shown}: weight_map names no files");
    }
    let dir = index.parent().unwrap_or(Path::new("."));
    names
        .into_iter()
        .map(|n| {
            let p = dir.join(n);
            if p.is_file() {
                Ok(p)
            } else {
                bail!("{shown}: shard {n} is missing from {}", dir.display())
            }
        })
        .collect()
}
