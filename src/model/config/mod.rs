//! [`ModelConfig`]: the hyper-parameters of a Llama-family decoder.
use crate::kv::{KvDtype, KvGroups, KvShape};
use crate::model::rope::{self, RopeScaling};

pub mod mla;
mod moe;

pub use mla::MlaConfig;
pub use moe::{MoeConfig, MoeScoring, MAX_EXPERTS};

/// Decoder families this engine runs; they differ only by config switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Llama, Llama-2/3, SmolLM2, TinyLlama (GGUF arch `llama`, HF `LlamaForCausalLM`).
    Llama,
    /// Mistral (sliding window ignored for contexts within it), HF `MistralForCausalLM`.
    Mistral,
    /// Qwen2 / Qwen2.5: bias on the Q, K and V projections.
    Qwen2,
    /// Qwen3: RMSNorm on each head of Q and K (q_norm, k_norm), explicit head_dim.
    Qwen3,
    /// Gemma 3 text model (GGUF `gemma3`, HF `Gemma3ForCausalLM`): embeddings times
    /// √hidden_size, RMSNorm on Q/K heads and after attention and MLP, GELU-tanh gated MLP,
    /// sliding-window layers with their own RoPE base (Gemma Team 2025, "Gemma 3").
    Gemma3,
    /// Qwen3-MoE (GGUF `qwen3moe`, HF `Qwen3MoeForCausalLM`): Qwen3's attention, a mixture
    /// of SwiGLU experts in every layer ([`MoeConfig`]; Qwen Team 2025, "Qwen3 Technical
    /// Report").
    Qwen3Moe,
    /// Mixtral (HF `MixtralForCausalLM`; GGUF `llama` with `llama.expert_count` > 0): Llama's
    /// attention, a mixture of SwiGLU experts in every layer (Jiang et al. 2024, "Mixtral of
    /// Experts").
    Mixtral,
    /// gpt-oss (GGUF `gpt-oss`; OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card"):
    /// biased Q/K/V/O projections, a learned attention sink per head, sliding-window layers
    /// (128) alternating with full ones, YaRN RoPE, and a mixture of experts whose router
    /// takes a softmax over the chosen logits only (the renormalized top-k of a softmax, the
    /// same numbers), each expert a clamped SwiGLU with biases.
    GptOss,
    /// DeepSeek-V2 and V3 (GGUF `deepseek2`, HF `DeepseekV2ForCausalLM` /
    /// `DeepseekV3ForCausalLM`; DeepSeek-AI 2024, arXiv:2405.04434 and arXiv:2412.19437):
    /// multi-head latent attention ([`MlaConfig`]) whose cache holds one latent per token,
    /// RoPE on a decoupled part of each head (interleaved pairs), the first
    /// `first_k_dense_replace` layers dense, the others a mixture of experts with shared
    /// experts, a softmax (V2) or sigmoid with a selection bias and expert groups (V3).
    DeepSeek2,
}

/// The gated MLP's activation: `down(act(gate(x)) · up(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HiddenAct {
    /// SiLU (SwiGLU; HF `silu`), the Llama family.
    #[default]
    Silu,
    /// GELU with the tanh approximation (GeGLU; HF `gelu_pytorch_tanh`), Gemma.
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: `g = min(gate, 7)`, `u = clamp(up, −7, 7)`,
    /// `g · σ(1.702 · g) · (u + 1)` (HF `GptOssExperts`, `swiglu_limit` 7; ggml
    /// `ggml_swiglu_oai` with alpha 1.702, limit 7).
    SwigluOai,
}

impl Architecture {
    /// The names this engine accepts, as GGUF `general.architecture` values.
    pub const GGUF_NAMES: &'static [&'static str] = &[
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma3",
        "qwen3moe",
        "gpt-oss",
        "deepseek2",
    ];

    /// Parse a GGUF `general.architecture` value. Errors: `None` for unsupported ones.
    pub fn from_gguf(name: &str) -> Option<Architecture> {
        Some(match name {
            "llama" => Architecture::Llama,
            "mistral" => Architecture::Mistral,
            "qwen2" => Architecture::Qwen2,
            "qwen3" => Architecture::Qwen3,
            "gemma3" => Architecture::Gemma3,
            "qwen3moe" => Architecture::Qwen3Moe,
            "gpt-oss" => Architecture::GptOss,
            "deepseek2" => Architecture::DeepSeek2,
            _ => return None,
        })
    }
}

/// Hyper-parameters of a decoder, named as in HF config.json (GGUF keys in brackets).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Decoder family.
    pub architecture: Architecture,
    /// `vocab_size` (length of `tokenizer.ggml.tokens`).
    pub vocab_size: usize,
    /// `hidden_size` (`{arch}.embedding_length`).
    pub hidden_size: usize,
    /// `intermediate_size` (`{arch}.feed_forward_length`).
    pub intermediate_size: usize,
    /// `num_hidden_layers` (`{arch}.block_count`).
    pub num_hidden_layers: usize,
    /// `num_attention_heads` (`{arch}.attention.head_count`).
    pub num_attention_heads: usize,
    /// `num_key_value_heads` (`{arch}.attention.head_count_kv`); GQA when below the heads.
    pub num_key_value_heads: usize,
    /// `head_dim` (`{arch}.attention.key_length`), else hidden_size / num_attention_heads.
    /// With MLA, each head's query/key width `qk_nope_head_dim + qk_rope_head_dim`
    /// (`{arch}.attention.key_length_mla`).
    pub head_dim: usize,
    /// `rms_norm_eps` (`{arch}.attention.layer_norm_rms_epsilon`).
    pub rms_norm_eps: f64,
    /// `rope_theta`, or `rope_parameters.rope_theta` (`{arch}.rope.freq_base`).
    pub rope_theta: f64,
    /// RoPE scaling: `rope_scaling` / `rope_parameters` `rope_type` (`{arch}.rope.scaling.*`).
    pub rope_scaling: RopeScaling,
    /// Per-dimension RoPE frequency divisors, `head_dim / 2` values (GGUF `rope_freqs.weight`).
    pub rope_freq_factors: Option<Vec<f32>>,
    /// Context window in tokens: `max_position_embeddings` (`{arch}.context_length`).
    pub max_position_embeddings: usize,
    /// `tie_word_embeddings`: the LM head reuses the token embedding (no `output.weight`).
    pub tie_word_embeddings: bool,
    /// RoPE pairs (2i, 2i+1) instead of (i, i + d/2): true for GGUF `llama` files, whose
    /// converter permuted the Q and K rows (llama.cpp convert_hf_to_gguf.py).
    pub rope_interleaved: bool,
    /// Q, K, V projections carry a bias (Qwen2; config.json `attention_bias` of Llama and
    /// Qwen3, where the output projection carries one too).
    pub attention_bias: bool,
    /// The MLP's gate, up and down projections carry a bias (Llama's config.json
    /// `mlp_bias`; false elsewhere, as in transformers).
    pub mlp_bias: bool,
    /// RMSNorm over each head of Q and K before RoPE (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// Per layer, its sliding window in tokens (HF `layer_types` / `sliding_window`, GGUF
    /// `{arch}.attention.sliding_window` with the architecture's layer pattern): the layer
    /// attends to the last W positions only. `None`: full causal attention. One entry per
    /// layer.
    pub layer_windows: Vec<Option<usize>>,
    /// RoPE base of the sliding-window layers (HF `rope_local_base_freq`, GGUF
    /// `{arch}.rope.freq_base_swa`; Gemma 3: 10,000), unscaled. `None`: every layer uses
    /// `rope_theta` and its scaling.
    pub rope_local_theta: Option<f64>,
    /// The gated MLP's activation (`hidden_act`, Gemma's `hidden_activation`).
    pub hidden_act: HiddenAct,
    /// Token embeddings multiplied by √hidden_size before the first layer (Gemma).
    pub scale_embeddings: bool,
    /// RMSNorm on the attention output and on the MLP output before each residual add
    /// (Gemma 2/3 `post_attention_layernorm` and `post_feedforward_layernorm`; GGUF
    /// `post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// `query_pre_attn_scalar` (Gemma): scores are scaled by its −½ power instead of
    /// head_dim's.
    pub query_pre_attn_scalar: Option<f64>,
    /// `final_logit_softcapping` (Gemma 2; GGUF `{arch}.final_logit_softcapping`): logits
    /// become `c · tanh(logits / c)`.
    pub final_logit_softcapping: Option<f64>,
    /// The mixture-of-experts block of every layer (Qwen3-MoE, Mixtral, gpt-oss); `None`: a
    /// dense MLP of `intermediate_size`.
    pub moe: Option<MoeConfig>,
    /// Multi-head latent attention's shape (DeepSeek); `None`: GQA.
    pub mla: Option<MlaConfig>,
    /// A learned sink logit per query head (gpt-oss, GGUF `attn_sinks`): it joins each row's
    /// softmax denominator as a key with no value, so a head may attend to nothing.
    pub attention_sinks: bool,
}

impl ModelConfig {
    /// The score scale: `query_pre_attn_scalar^−½`, else `head_dim^−½`.
    pub fn attention_scale(&self) -> f32 {
        let s = self.query_pre_attn_scalar.unwrap_or(self.head_dim as f64);
        let factor = self.mla.map_or(1.0, |m| m.score_factor);
        (factor / s.sqrt()) as f32
    }

    /// Values of a head RoPE rotates: `head_dim`, or MLA's `qk_rope_head_dim`.
    pub fn rope_dim(&self) -> usize {
        self.mla.map_or(self.head_dim, |m| m.qk_rope_head_dim)
    }

    /// Whether some layer slides (a hybrid or all-sliding model).
    pub fn has_sliding_layers(&self) -> bool {
        self.layer_windows.iter().any(Option::is_some)
    }

    /// Number of query heads sharing one K/V head (GQA group size).
    pub fn num_key_value_groups(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads
    }

    /// The shape of this model's KV cache when stored as `dtype` (the engine's choice,
    /// `--kv-cache-dtype`): `num_hidden_layers`, `num_key_value_heads`, `head_dim`.
    pub fn kv_shape(&self, dtype: KvDtype) -> KvShape {
        match self.mla {
            // One latent row per token and layer (`kv-size`'s MLA figure).
            Some(m) => KvShape {
                num_layers: self.num_hidden_layers,
                num_key_value_heads: 1,
                head_dim: m.latent_width(),
                dtype,
                latent: true,
            },
            None => KvShape {
                num_layers: self.num_hidden_layers,
                num_key_value_heads: self.num_key_value_heads,
                head_dim: self.head_dim,
                dtype,
                latent: false,
            },
        }
    }

    /// How the KV cache groups the layers: by their windows (a hybrid cache whose sliding
    /// groups give blocks back as they leave the window), or, with `swa_full` (llama.cpp's
    /// `--swa-full`), one group keeping every block, the windows applied as masks.
    pub fn kv_groups(&self, swa_full: bool) -> KvGroups {
        match swa_full {
            true => KvGroups::single(self.num_hidden_layers),
            false => KvGroups::of(&self.layer_windows),
        }
    }

    /// RoPE's `head_dim / 2` inverse frequencies (radians per position) and the factor cos
    /// and sin are scaled by, from `rope_theta`, `rope_scaling` and `rope_freq_factors`
    /// (see [`rope::inv_freq`]).
    pub fn rope_inv_freq(&self) -> (Vec<f64>, f64) {
        let f = rope::inv_freq(
            self.rope_dim(),
            self.rope_theta,
            &self.rope_scaling,
            self.rope_freq_factors.as_deref(),
        );
        (f, self.rope_scaling.attention_factor())
    }

    /// Check the numbers fit together. Errors: a one-line description of the first problem.
    pub fn validate(&self) -> anyhow::Result<()> {
        let c = self;
        check_layer_count("num_hidden_layers", c.num_hidden_layers)
            .map_err(|e| anyhow::anyhow!("invalid model config: {e}"))?;
        let checks = [
            (c.num_hidden_layers == 0, "num_hidden_layers is 0"),
            (
                !(c.rms_norm_eps.is_finite() && c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0),
                "rms_norm_eps must be a small positive number",
            ),
            (c.num_attention_heads == 0, "num_attention_heads is 0"),
            (c.num_key_value_heads == 0, "num_key_value_heads is 0"),
            (
                c.head_dim == 0 || !c.head_dim.is_multiple_of(2),
                "head_dim must be even and positive",
            ),
            (c.vocab_size == 0, "the vocabulary is empty"),
            (c.max_position_embeddings == 0, "the context length is 0"),
            (
                !(c.rope_theta.is_finite() && c.rope_theta > 1.0),
                "rope_theta must be a number above 1",
            ),
            (
                c.rope_freq_factors
                    .as_ref()
                    .is_some_and(|f| f.len() != c.rope_dim() / 2),
                "rope_freqs.weight must hold head_dim / 2 values",
            ),
            (
                c.rope_freq_factors
                    .as_ref()
                    .is_some_and(|f| f.iter().any(|&v| !(v.is_finite() && v > 0.0))),
                "rope_freqs.weight holds a value that is not a positive number",
            ),
            (
                !c.num_attention_heads
                    .is_multiple_of(c.num_key_value_heads.max(1)),
                "num_attention_heads is not a multiple of num_key_value_heads",
            ),
            (
                c.layer_windows.len() != c.num_hidden_layers,
                "the layer window list does not have one entry per layer",
            ),
            (
                c.layer_windows.contains(&Some(0)),
                "sliding_window is 0: a sliding-window layer must see at least its own token",
            ),
            (
                c.rope_local_theta
                    .is_some_and(|t| !(t.is_finite() && t > 1.0)),
                "rope_local_base_freq must be a number above 1",
            ),
            (
                c.query_pre_attn_scalar
                    .is_some_and(|s| !(s.is_finite() && s > 0.0)),
                "query_pre_attn_scalar must be a positive number",
            ),
            (
                c.final_logit_softcapping
                    .is_some_and(|s| !(s.is_finite() && s > 0.0)),
                "final_logit_softcapping must be a positive number",
            ),
        ];
        for (bad, what) in checks {
            if bad {
                anyhow::bail!("invalid model config: {what}");
            }
        }
        if let Some(m) = &c.mla {
            m.validate()?;
            if m.q_head_dim() != c.head_dim {
                anyhow::bail!(
                    "invalid model config: qk_nope_head_dim {} + qk_rope_head_dim {} is not the key length {}",
                    m.qk_nope_head_dim,
                    m.qk_rope_head_dim,
                    c.head_dim
                );
            }
        }
        Ok(())
    }
}

/// Check a layer count read from a file (`key` names the field) before anything sized by it is
/// allocated: a file that declares 2^40 layers is refused, not answered with a per-layer list
/// of that length. Errors: more than [`crate::sizing::spec::MAX_LAYERS`].
pub fn check_layer_count(key: &str, layers: usize) -> anyhow::Result<()> {
    let max = crate::sizing::spec::MAX_LAYERS;
    if layers as u64 > max {
        anyhow::bail!("{key} is {layers}, more than {max} layers is not a real model");
    }
    Ok(())
}
