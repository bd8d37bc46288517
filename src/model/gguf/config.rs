//! [`GgufFile::config`]: a GGUF file's metadata (`general.architecture`, `{arch}.*` keys)
//! as a [`ModelConfig`], checked as llama.cpp's loader checks it.
use super::GgufFile;
use crate::model::arch::Blocks;
use crate::model::config::{Architecture, HiddenAct, ModelConfig, MoeConfig};
use crate::model::decoder::norm::NormKind;
use anyhow::{bail, Context, Result};

impl GgufFile {
    /// The model's hyper-parameters from `general.architecture` and `{arch}.*` keys.
    ///
    /// RoPE: `{arch}.rope.freq_base`, and the scaling keys and `rope_freqs.weight` tensor
    /// (see `GgufFile::rope` in `gguf/rope.rs`).
    ///
    /// Errors: an architecture this engine does not run, a missing key, inconsistent numbers,
    /// RoPE settings this engine does not compute (named).
    pub fn config(&self) -> Result<ModelConfig> {
        let arch_name = self.meta_str("general.architecture")?.to_string();
        let mut architecture = Architecture::from_gguf(&arch_name).with_context(|| {
            format!(
                "{}: unsupported architecture {arch_name:?} (supported: {})",
                self.path,
                Architecture::GGUF_NAMES.join(", ")
            )
        })?;
        let k = |s: &str| format!("{arch_name}.{s}");
        let hidden_size = self.meta_u32(&k("embedding_length"))? as usize;
        let num_attention_heads = self.meta_u32(&k("attention.head_count"))? as usize;
        // Absent: as many KV heads as query heads (llama.cpp's default); present, it must be
        // one integer (a per-layer array, as OpenELM's, is refused by meta_u32).
        let num_key_value_heads = self
            .meta_u32_opt(&k("attention.head_count_kv"))?
            .map_or(num_attention_heads, |n| n as usize);
        if num_attention_heads == 0 {
            bail!("{}: {} is 0", self.path, k("attention.head_count"));
        }
        let deepseek = architecture == Architecture::DeepSeek2;
        let mla = match deepseek {
            true => Some(self.mla_shape(&arch_name)?),
            false => None,
        };
        let head_dim = match (mla, self.meta_u32_opt(&k("attention.key_length"))?) {
            (Some((_, key)), _) => key,
            (None, Some(n)) => n as usize,
            (None, None) if !hidden_size.is_multiple_of(num_attention_heads) => bail!(
                "{}: {} {hidden_size} is not a multiple of {} {num_attention_heads} (and {} is absent)",
                self.path,
                k("embedding_length"),
                k("attention.head_count"),
                k("attention.key_length")
            ),
            (None, None) => hidden_size / num_attention_heads,
        };
        // Keys of layouts this decoder does not run: V heads of another width than K's
        // (llama.cpp sizes attn_v by value_length), mixture-of-experts FFNs.
        if let Some(v) = self.meta_u32_opt(&k("attention.value_length"))? {
            if v as usize != head_dim && !deepseek {
                bail!(
                    "{}: {} is {v} but head_dim is {head_dim}: V heads of another width than K's are not supported",
                    self.path,
                    k("attention.value_length")
                );
            }
        }
        let num_hidden_layers = self.meta_u32(&k("block_count"))? as usize;
        let moe = match deepseek {
            true => Some(self.deepseek_moe(&arch_name, num_hidden_layers)?),
            false => self.moe(&arch_name, architecture)?,
        };
        // A `llama` file with experts is Mixtral (llama.cpp runs both as LLM_ARCH_LLAMA).
        if moe.is_some() && architecture == Architecture::Llama {
            architecture = Architecture::Mixtral;
        }
        let vocab_size = match self.meta("tokenizer.ggml.tokens")?.to_vec() {
            Ok(v) => v.len(),
            Err(_) => bail!("{}: tokenizer.ggml.tokens is not an array", self.path),
        };
        let tie_word_embeddings = self.dims_of("output.weight").is_none();
        let max_position_embeddings = self.meta_u32(&k("context_length"))? as usize;
        let rope_dim = mla.map_or(head_dim, |(m, _)| m.qk_rope_head_dim);
        let (mut rope_scaling, rope_freq_factors) =
            self.rope(&arch_name, rope_dim, max_position_embeddings)?;
        let mla = match mla {
            Some((m, _)) => Some(crate::model::config::MlaConfig {
                score_factor: self.deepseek_yarn(&arch_name, &mut rope_scaling)?,
                ..m
            }),
            None => None,
        };
        // Before the per-layer window list is sized by it.
        crate::model::config::check_layer_count(&k("block_count"), num_hidden_layers)
            .with_context(|| self.path.clone())?;
        let gemma = architecture == Architecture::Gemma3;
        let gpt_oss = architecture == Architecture::GptOss;
        let layer_windows = self.layer_windows(&arch_name, architecture, num_hidden_layers)?;
        let rope_local_theta = match gemma && layer_windows.iter().any(Option::is_some) {
            true => Some(
                self.meta_number(&k("rope.freq_base_swa"))?
                    .unwrap_or(10_000.0),
            ),
            false => None,
        };
        let final_logit_softcapping = self
            .meta_number(&k("final_logit_softcapping"))?
            .filter(|&c| c != 0.0);
        let blocks = Blocks::of(architecture);
        let config = ModelConfig {
            architecture,
            vocab_size,
            hidden_size,
            // A mixture of experts may leave the dense size out (nothing reads it then).
            intermediate_size: match moe {
                Some(m) => self
                    .meta_u32_opt(&k("feed_forward_length"))?
                    .map_or(m.moe_intermediate_size, |n| n as usize),
                None => self.meta_u32(&k("feed_forward_length"))? as usize,
            },
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: self
                .meta_number(&k("attention.layer_norm_rms_epsilon"))?
                .with_context(|| {
                    format!(
                        "{}: GGUF metadata has no key {}",
                        self.path,
                        k("attention.layer_norm_rms_epsilon")
                    )
                })?,
            // Any number type (a u32 100000 is θ = 100000, not the default); absent: 10000.
            rope_theta: self.meta_number(&k("rope.freq_base"))?.unwrap_or(10_000.0),
            rope_scaling,
            rope_freq_factors,
            max_position_embeddings,
            tie_word_embeddings,
            rope_interleaved: matches!(
                architecture,
                Architecture::Llama
                    | Architecture::Mistral
                    | Architecture::Mixtral
                    | Architecture::DeepSeek2
            ),
            attention_bias: matches!(architecture, Architecture::Qwen2 | Architecture::GptOss),
            mlp_bias: false,
            qk_norm: blocks.qk_norm,
            layer_windows,
            rope_local_theta,
            hidden_act: match architecture {
                Architecture::Gemma3 => HiddenAct::GeluTanh,
                Architecture::GptOss => HiddenAct::SwigluOai,
                _ => HiddenAct::Silu,
            },
            scale_embeddings: blocks.scale_embeddings,
            post_norms: blocks.norms == NormKind::Sandwich,
            // llama.cpp (models/gemma3.cpp): scores scaled by head_dim^−½, except the
            // 62-layer 27B, by (hidden / heads)^−½ (gemma_pytorch's config).
            query_pre_attn_scalar: match gemma && num_hidden_layers == 62 {
                true => Some((hidden_size / num_attention_heads) as f64),
                false => None,
            },
            final_logit_softcapping,
            moe,
            attention_sinks: gpt_oss,
            mla,
        };
        config.validate().with_context(|| self.path.to_string())?;
        // Layers past block_count (llama.cpp: "wrong number of tensors").
        let layers = config.num_hidden_layers;
        let mut names = self.content.tensor_infos.keys().chain(self.foreign.keys());
        if let Some(name) = names.find(|n| {
            n.strip_prefix("blk.")
                .and_then(|r| r.split('.').next())
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| i >= layers)
        }) {
            bail!(
                "{}: tensor {name} is past {} {layers} (the file's layers and its metadata disagree)",
                self.path,
                k("block_count")
            );
        }
        Ok(config)
    }
}

impl GgufFile {
    /// The mixture-of-experts block from `{arch}.expert_count` (absent or 0: a dense MLP),
    /// `{arch}.expert_used_count` and `{arch}.expert_feed_forward_length` (absent: the
    /// dense `feed_forward_length`, as Mixtral files give it). The router renormalizes the
    /// chosen weights, as llama.cpp's `build_moe_ffn` does for `qwen3moe` and `llama`.
    ///
    /// Errors: experts on an architecture without a mixture-of-experts block here, shared
    /// experts (`expert_shared_count`, Qwen2-MoE's), a gating function other than softmax
    /// (`expert_gating_func` 1), or numbers [`crate::model::config::MoeConfig::validate`]
    /// refuses (each names its key).
    fn moe(&self, arch: &str, architecture: Architecture) -> Result<Option<MoeConfig>> {
        let k = |s: &str| format!("{arch}.{s}");
        let num_experts = match self.meta_u32_opt(&k("expert_count"))? {
            None | Some(0)
                if matches!(architecture, Architecture::Qwen3Moe | Architecture::GptOss) =>
            {
                bail!(
                    "{}: {} is missing or 0: a {arch} file needs experts",
                    self.path,
                    k("expert_count")
                )
            }
            None | Some(0) => return Ok(None),
            Some(n) => n as usize,
        };
        if !matches!(
            architecture,
            Architecture::Llama | Architecture::Qwen3Moe | Architecture::GptOss
        ) {
            bail!(
                "{}: {} is {num_experts}: mixture-of-experts {arch} models are not supported (qwen3moe, gpt-oss and llama/Mixtral are)",
                self.path,
                k("expert_count")
            );
        }
        if let Some(n) = self
            .meta_u32_opt(&k("expert_shared_count"))?
            .filter(|&n| n > 0)
        {
            bail!(
                "{}: {} is {n}: shared experts are not supported",
                self.path,
                k("expert_shared_count")
            );
        }
        // gpt-oss's router is fixed by its architecture (llama.cpp's graph ignores the key).
        if let Some(g) = self
            .meta_u32_opt(&k("expert_gating_func"))?
            .filter(|&g| g != 1 && architecture != Architecture::GptOss)
        {
            bail!(
                "{}: {} is {g}: only the softmax router (1) is supported",
                self.path,
                k("expert_gating_func")
            );
        }
        let used_key = k("expert_used_count");
        let num_experts_per_tok = self
            .meta_u32_opt(&used_key)?
            .with_context(|| format!("{}: GGUF metadata has no key {used_key}", self.path))?
            as usize;
        let ffn_key = match self.meta_u32_opt(&k("expert_feed_forward_length"))? {
            Some(_) => k("expert_feed_forward_length"),
            None => k("feed_forward_length"),
        };
        let moe = MoeConfig::plain(
            num_experts,
            num_experts_per_tok,
            self.meta_u32(&ffn_key)? as usize,
            true,
        );
        moe.validate(&k("expert_count"), &used_key, &ffn_key)
            .with_context(|| self.path.clone())?;
        Ok(Some(moe))
    }

    /// Each layer's sliding window, as llama.cpp reads them: for `gemma3` and `gpt-oss`, a
    /// positive `{arch}.attention.sliding_window` on the layers
    /// `{arch}.attention.sliding_window_pattern` marks (an array of bools, one per layer; or a
    /// period n: layer i slides iff i mod n < n − 1, every layer when n is 0; absent: 6 for
    /// Gemma 3, five sliding layers to one global, 2 for gpt-oss, sliding and full
    /// alternating from layer 0). Other architectures: full attention on every layer.
    ///
    /// Errors: a window of 0 on a gemma3 file, a pattern array of another length than the
    /// layers, or a pattern key of another type (named).
    fn layer_windows(
        &self,
        arch: &str,
        architecture: Architecture,
        layers: usize,
    ) -> Result<Vec<Option<usize>>> {
        // Period of the sliding layers when the file gives no pattern (llama.cpp's
        // `load_swa_pattern` argument): Gemma 3 five sliding to one global, gpt-oss alternate.
        let default_period = match architecture {
            Architecture::Gemma3 => 6,
            Architecture::GptOss => 2,
            _ => return Ok(vec![None; layers]),
        };
        let key = format!("{arch}.attention.sliding_window");
        let window = match self.meta_u32_opt(&key)? {
            None if architecture == Architecture::GptOss => {
                bail!("{}: GGUF metadata has no key {key}", self.path)
            }
            None => return Ok(vec![None; layers]),
            Some(0) => bail!(
                "{}: {key} is 0: a sliding-window layer must see at least its own token",
                self.path
            ),
            Some(w) => w as usize,
        };
        let pattern_key = format!("{arch}.attention.sliding_window_pattern");
        let slides: Vec<bool> = match self.content.metadata.get(&pattern_key) {
            Some(candle_core::quantized::gguf_file::Value::Array(items)) => {
                if items.len() != layers {
                    bail!(
                        "{}: {pattern_key} has {} entries for {layers} layers",
                        self.path,
                        items.len()
                    );
                }
                items
                    .iter()
                    .map(|v| match v {
                        candle_core::quantized::gguf_file::Value::Bool(b) => Ok(*b),
                        _ => bail!("{}: {pattern_key} holds {v:?}, not a bool", self.path),
                    })
                    .collect::<Result<_>>()?
            }
            _ => {
                let n = self.meta_u32_opt(&pattern_key)?.unwrap_or(default_period) as usize;
                (0..layers).map(|i| n == 0 || i % n < n - 1).collect()
            }
        };
        Ok(slides.into_iter().map(|s| s.then_some(window)).collect())
    }
}
