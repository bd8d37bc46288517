//! config.json of a Hugging Face model folder → [`ModelConfig`].
//!
//! Field names and defaults are transformers' (`LlamaConfig`, `MistralConfig`, `Qwen2Config`,
//! `Qwen3Config`, `Qwen3MoeConfig`, `MixtralConfig`, `Gemma3TextConfig`: see `hf/gemma.rs`,
//! `GptOssConfig`: see `hf/gpt_oss.rs`). HF checkpoints keep the rotate-half RoPE pairing (i, i + head_dim/2), so
//! `rope_interleaved` is false for every architecture here.
use crate::model::arch::Blocks;
use crate::model::config::{Architecture, HiddenAct, ModelConfig, MoeConfig};
use crate::model::decoder::norm::NormKind;
use crate::model::hf::fields::Fields;
use crate::model::hf::rope;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::path::Path;

/// The `architectures` values this engine runs, with the decoder family each maps to.
pub const SUPPORTED: &[(&str, Architecture)] = &[
    ("LlamaForCausalLM", Architecture::Llama),
    ("MistralForCausalLM", Architecture::Mistral),
    ("Qwen2ForCausalLM", Architecture::Qwen2),
    ("Qwen3ForCausalLM", Architecture::Qwen3),
    ("Gemma3ForCausalLM", Architecture::Gemma3),
    ("Qwen3MoeForCausalLM", Architecture::Qwen3Moe),
    ("MixtralForCausalLM", Architecture::Mixtral),
    ("GptOssForCausalLM", Architecture::GptOss),
    ("DeepseekV2ForCausalLM", Architecture::DeepSeek2),
    ("DeepseekV3ForCausalLM", Architecture::DeepSeek2),
];

/// What config.json says about a model: its hyper-parameters and special token ids.
#[derive(Debug, Clone, PartialEq)]
pub struct HfConfig {
    /// The decoder's hyper-parameters.
    pub config: ModelConfig,
    /// `eos_token_id` (an id or a list of ids; empty when absent or null).
    pub eos_token_ids: Vec<u32>,
    /// `bos_token_id`, when set.
    pub bos_token_id: Option<u32>,
    /// `torch_dtype` (or `dtype`) as written, e.g. `bfloat16`; informational.
    pub torch_dtype: Option<String>,
}

/// Read and parse `path` (a config.json). Errors: unreadable, not JSON, or as [`parse`]; the
/// message names the file.
pub fn read(path: &Path) -> Result<HfConfig> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).with_context(|| format!("{shown}: cannot read"))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| anyhow!("{shown}: not valid JSON ({e})"))?;
    parse(&value).with_context(|| format!("{shown}"))
}

/// Only `eos_token_id` (ids) and `bos_token_id` of a config.json, for loading a tokenizer
/// without the model: the other fields are not read or checked. Errors: unreadable, not a
/// JSON object, or a token id field that holds something else (named).
pub fn read_special_ids(path: &Path) -> Result<(Vec<u32>, Option<u32>)> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).with_context(|| format!("{shown}: cannot read"))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| anyhow!("{shown}: not valid JSON ({e})"))?;
    let obj = value
        .as_object()
        .ok_or_else(|| anyhow!("{shown}: not a JSON object"))?;
    let f = Fields(obj);
    let eos = token_ids(&f, "eos_token_id").with_context(|| format!("{shown}"))?;
    let bos = token_ids(&f, "bos_token_id").with_context(|| format!("{shown}"))?;
    Ok((eos, bos.first().copied()))
}

/// Parse a config.json document.
///
/// Errors: an architecture outside [`SUPPORTED`] (named, with the supported list), a missing
/// or mistyped field (named), a quantized checkpoint (`quantization_config`), an activation
/// other than SiLU, RoPE settings [`rope::parse`] refuses (a `rope_type` other than default,
/// linear, llama3 or yarn), or numbers that do not fit together.
pub fn parse(root: &Value) -> Result<HfConfig> {
    let obj = root
        .as_object()
        .ok_or_else(|| anyhow!("config.json is not a JSON object"))?;
    let f = Fields(obj);
    let architecture = architecture(&f)?;
    let gemma = architecture == Architecture::Gemma3;
    for key in ["hidden_act", "hidden_activation"]
        .into_iter()
        .filter(|_| !gemma)
    {
        if let Some(act) = f.opt_str(key)? {
            if act != "silu" && act != "swish" {
                bail!("{key} is {act:?}; only \"silu\" (SwiGLU MLP) is supported");
            }
        }
    }
    let gpt_oss = architecture == Architecture::GptOss;
    let mxfp4 = |q: &Value| {
        gpt_oss
            && q.as_object()
                .is_some_and(super::gpt_oss::quantization_is_ours)
    };
    if let Some(q) = obj
        .get("quantization_config")
        .filter(|v| !v.is_null() && !mxfp4(v))
    {
        let method = q
            .get("quant_method")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        bail!("quantized checkpoint (quantization_config.quant_method {method:?}) is not supported: use an f32, f16 or bf16 checkpoint (or gpt-oss's MXFP4), or a GGUF");
    }
    let hidden_size = f.usize("hidden_size")?;
    let num_attention_heads = f.usize("num_attention_heads")?;
    let num_key_value_heads = f
        .opt_usize("num_key_value_heads")?
        .unwrap_or(num_attention_heads);
    let head_dim = match f.opt_usize("head_dim")? {
        Some(d) => d,
        None if matches!(architecture, Architecture::Qwen3 | Architecture::Qwen3Moe) => {
            bail!("head_dim is missing (Qwen3 configs give it explicitly)")
        }
        // transformers' Gemma3TextConfig default.
        None if gemma => 256,
        None => hidden_size / num_attention_heads.max(1),
    };
    let default_context = match architecture {
        Architecture::Llama => 2048,
        Architecture::Mistral | Architecture::Mixtral => 4096 * 32,
        Architecture::Qwen2 | Architecture::Qwen3 | Architecture::Qwen3Moe => 32768,
        Architecture::Gemma3 | Architecture::GptOss => 131_072,
        Architecture::DeepSeek2 => 163_840,
    };
    let max_position_embeddings = f
        .opt_usize("max_position_embeddings")?
        .unwrap_or(default_context);
    let num_hidden_layers = f.usize("num_hidden_layers")?;
    // Before the per-layer lists below are sized by it.
    crate::model::config::check_layer_count("num_hidden_layers", num_hidden_layers)?;
    let gemma_fields = match gemma {
        true => Some(super::gemma::parse(
            obj,
            &f,
            num_hidden_layers,
            max_position_embeddings,
        )?),
        false => None,
    };
    let (rope_theta, rope_scaling) = match &gemma_fields {
        Some(g) => g.rope.clone(),
        None => rope::parse(obj, max_position_embeddings)?,
    };
    let blocks = Blocks::of(architecture);
    let deepseek = architecture == Architecture::DeepSeek2;
    let (moe, mla, head_dim) = match deepseek {
        true => {
            let (mla, key) = super::deepseek::mla(&f, &rope_scaling)?;
            let v3 = is_v3(&f);
            let moe = super::deepseek::moe(&f, num_hidden_layers, v3)?;
            (moe, Some(mla), key)
        }
        false => (moe(&f, architecture)?, None, head_dim),
    };
    let config = ModelConfig {
        architecture,
        vocab_size: f.usize("vocab_size")?,
        hidden_size,
        intermediate_size: f.usize("intermediate_size")?,
        num_hidden_layers,
        num_attention_heads,
        num_key_value_heads,
        head_dim,
        rms_norm_eps: f
            .opt_f64("rms_norm_eps")?
            .unwrap_or(if gpt_oss { 1e-5 } else { 1e-6 }),
        rope_theta,
        rope_scaling,
        rope_freq_factors: None,
        max_position_embeddings,
        tie_word_embeddings: f.opt_bool("tie_word_embeddings")?.unwrap_or(gemma),
        // DeepSeek's HF code pairs (2i, 2i + 1) of the RoPE part (it de-interleaves q and k
        // alike before rotate-half: the same scores as rotating the interleaved pairs).
        rope_interleaved: deepseek,
        attention_bias: match architecture {
            Architecture::Qwen2 => true,
            // transformers' Mistral and Mixtral layers have no bias, whatever the config says.
            Architecture::Mistral | Architecture::Mixtral => false,
            _ => f.opt_bool("attention_bias")?.unwrap_or(gpt_oss),
        },
        mlp_bias: match architecture {
            Architecture::Llama => f.opt_bool("mlp_bias")?.unwrap_or(false),
            _ => false,
        },
        qk_norm: blocks.qk_norm,
        layer_windows: match &gemma_fields {
            Some(g) => g.layer_windows.clone(),
            None if gpt_oss => super::gpt_oss::layer_windows(&f, num_hidden_layers)?,
            None => layer_windows(&f, num_hidden_layers)?,
        },
        rope_local_theta: gemma_fields.as_ref().map(|g| g.rope_local_theta),
        hidden_act: match architecture {
            Architecture::Gemma3 => HiddenAct::GeluTanh,
            Architecture::GptOss => HiddenAct::SwigluOai,
            _ => HiddenAct::Silu,
        },
        scale_embeddings: blocks.scale_embeddings,
        post_norms: blocks.norms == NormKind::Sandwich,
        query_pre_attn_scalar: gemma_fields.as_ref().map(|g| g.query_pre_attn_scalar),
        final_logit_softcapping: gemma_fields
            .as_ref()
            .and_then(|g| g.final_logit_softcapping),
        moe,
        attention_sinks: gpt_oss,
        mla,
    };
    config.validate()?;
    Ok(HfConfig {
        config,
        eos_token_ids: token_ids(&f, "eos_token_id")?,
        bos_token_id: token_ids(&f, "bos_token_id")?.first().copied(),
        torch_dtype: f
            .opt_str("torch_dtype")?
            .or(f.opt_str("dtype")?)
            .map(str::to_string),
    })
}

/// The mixture-of-experts block of a Qwen3-MoE, Mixtral or gpt-oss config (transformers'
/// `Qwen3MoeConfig`: `num_experts`, `num_experts_per_tok`, `moe_intermediate_size`,
/// `norm_topk_prob` default false; `MixtralConfig`: `num_local_experts`,
/// `num_experts_per_tok`, the experts of `intermediate_size`, always renormalized; gpt-oss:
/// `hf/gpt_oss.rs`); `None` for the dense architectures.
///
/// Errors: a missing or mistyped field, numbers `MoeConfig::validate` refuses, or Qwen3-MoE
/// layers that are dense (`mlp_only_layers`, a `decoder_sparse_step` other than 1).
fn moe(f: &Fields, architecture: Architecture) -> Result<Option<MoeConfig>> {
    let moe = match architecture {
        Architecture::Qwen3Moe => {
            let dense_layers = match f.0.get("mlp_only_layers") {
                Some(Value::Array(a)) => a.len(),
                _ => 0,
            };
            let step = f.opt_usize("decoder_sparse_step")?.unwrap_or(1);
            if dense_layers > 0 || step != 1 {
                bail!("mlp_only_layers / decoder_sparse_step make some layers dense: only a mixture of experts in every layer is supported");
            }
            let m = MoeConfig::plain(
                f.usize("num_experts")?,
                f.usize("num_experts_per_tok")?,
                f.usize("moe_intermediate_size")?,
                f.opt_bool("norm_topk_prob")?.unwrap_or(false),
            );
            m.validate(
                "num_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
            )?;
            m
        }
        Architecture::Mixtral => {
            let m = MoeConfig::plain(
                f.usize("num_local_experts")?,
                f.usize("num_experts_per_tok")?,
                f.usize("intermediate_size")?,
                true,
            );
            m.validate(
                "num_local_experts",
                "num_experts_per_tok",
                "intermediate_size",
            )?;
            m
        }
        Architecture::GptOss => super::gpt_oss::moe(f)?,
        _ => return Ok(None),
    };
    Ok(Some(moe))
}

/// Whether a DeepSeek config is V3's (`architectures` or `model_type`).
fn is_v3(f: &Fields) -> bool {
    let named = |v: &Value| v.as_str().is_some_and(|s| s.starts_with("DeepseekV3"));
    match f.0.get("architectures") {
        Some(Value::Array(a)) if a.iter().any(named) => true,
        _ => f.0.get("model_type").and_then(Value::as_str) == Some("deepseek_v3"),
    }
}

/// The decoder family from `architectures` (else `model_type`).
fn architecture(f: &Fields) -> Result<Architecture> {
    let supported = || {
        SUPPORTED
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let lookup = |name: &str| SUPPORTED.iter().find(|(n, _)| *n == name).map(|(_, a)| *a);
    match f.0.get("architectures") {
        Some(Value::Array(names)) if !names.is_empty() => {
            let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
            names.iter().find_map(|n| lookup(n)).ok_or_else(|| {
                anyhow!(
                    "unsupported architecture {:?} (supported: {})",
                    names.join(", "),
                    supported()
                )
            })
        }
        _ => {
            let model_type = f.opt_str("model_type")?.unwrap_or("");
            let arch = match model_type {
                "llama" => Architecture::Llama,
                "mistral" => Architecture::Mistral,
                "qwen2" => Architecture::Qwen2,
                "qwen3" => Architecture::Qwen3,
                "gemma3_text" => Architecture::Gemma3,
                "qwen3_moe" => Architecture::Qwen3Moe,
                "mixtral" => Architecture::Mixtral,
                "gpt_oss" => Architecture::GptOss,
                "deepseek_v2" | "deepseek_v3" => Architecture::DeepSeek2,
                "gemma3" => bail!(
                    "model_type \"gemma3\" is the multimodal Gemma 3 (its text model sits under text_config): give a Gemma3ForCausalLM text checkpoint or a GGUF"
                ),
                "" => bail!(
                    "no architectures and no model_type: cannot tell the model (supported: {})",
                    supported()
                ),
                other => bail!(
                    "unsupported model_type {other:?} (supported architectures: {})",
                    supported()
                ),
            };
            Ok(arch)
        }
    }
}

/// Each layer's sliding window in a Llama/Mistral/Qwen2/Qwen3 config — the same rules as
/// `kv-size` (`crate::sizing::spec`) and transformers: `layer_types` naming
/// `sliding_attention` layers (transformers ≥ 4.53); else a positive `sliding_window` on
/// every layer (Mistral), unless `use_sliding_window` is false, or, when it is true, on the
/// layers from `max_window_layers` on (Qwen2/Qwen3).
///
/// Errors: a `sliding_window` that is not a positive integer when a layer needs it, a
/// `layer_types` list of another length than the layers.
fn layer_windows(f: &Fields, layers: usize) -> Result<Vec<Option<usize>>> {
    let window = match f.opt_usize("sliding_window")? {
        Some(0) | None => None,
        Some(w) => Some(w),
    };
    if let Some(Value::Array(types)) = f.present("layer_types") {
        if types.len() != layers {
            bail!(
                "layer_types has {} entries for num_hidden_layers {layers}",
                types.len()
            );
        }
        return types
            .iter()
            .map(|t| match (t.as_str(), window) {
                (Some("sliding_attention" | "sliding_window"), Some(w)) => Ok(Some(w)),
                (Some("sliding_attention" | "sliding_window"), None) => {
                    bail!(
                        "layer_types names a sliding_attention layer but sliding_window is missing"
                    )
                }
                _ => Ok(None),
            })
            .collect();
    }
    let Some(w) = window else {
        return Ok(vec![None; layers]);
    };
    Ok(match f.opt_bool("use_sliding_window")? {
        Some(false) => vec![None; layers],
        Some(true) => {
            let from = f.opt_usize("max_window_layers")?.unwrap_or(0);
            (0..layers).map(|i| (i >= from).then_some(w)).collect()
        }
        None => vec![Some(w); layers],
    })
}

/// An id or a list of ids at `key` (null or absent: none).
fn token_ids(f: &Fields, key: &str) -> Result<Vec<u32>> {
    let as_id = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    match f.0.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| as_id(v).ok_or_else(|| anyhow!("{key} holds {v}, not a token id")))
            .collect(),
        Some(v) => as_id(v)
            .map(|id| vec![id])
            .ok_or_else(|| anyhow!("{key} is {v}, not a token id")),
    }
}

#[cfg(test)]
mod tests;
