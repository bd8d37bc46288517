//! A `deepseek2` GGUF's MLA and mixture-of-experts keys, as llama.cpp's converter writes them
//! (`conversion/deepseek.py`) and its loader reads them (`src/models/deepseek2.cpp`).
//!
//! MLA: `{arch}.attention.kv_lora_rank`, `q_lora_rank` (absent: one `attn_q`), the per-head
//! key/value widths `key_length_mla` / `value_length_mla` (files since llama.cpp's MLA
//! cache; older files give them as `key_length` / `value_length` and a fused `attn_kv_b`),
//! `rope.dimension_count` (the decoupled RoPE part); YaRN's `rope.scaling.yarn_log_multiplier`
//! is `0.1 · mscale_all_dim`. Experts: `expert_count`, `expert_used_count`,
//! `expert_feed_forward_length`, `expert_shared_count`, `expert_weights_scale`,
//! `expert_weights_norm`, `expert_gating_func` (1 softmax, 2 sigmoid), `expert_group_count`,
//! `expert_group_used_count`, `leading_dense_block_count`.
use super::GgufFile;
use crate::model::config::{MlaConfig, MoeConfig, MoeScoring};
use crate::model::rope::RopeScaling;
use anyhow::{bail, Context, Result};

/// Largest `rope.scaling.yarn_log_multiplier` accepted (`0.1 · mscale_all_dim`).
const MAX_YARN_LOG_MULTIPLIER: f64 = 10.0;

impl GgufFile {
    /// The MLA shape of a `deepseek2` file and its per-head key width (the config's
    /// `head_dim`). The YaRN score factor is filled in by [`GgufFile::deepseek_yarn`].
    ///
    /// Errors: a missing or zero `kv_lora_rank`, a RoPE part of 0, odd, or not below the key
    /// width (the dimensions do not add up), a value width of 0.
    pub(super) fn mla_shape(&self, arch: &str) -> Result<(MlaConfig, usize)> {
        let k = |s: &str| format!("{arch}.{s}");
        let path = &self.path;
        let rank_key = k("attention.kv_lora_rank");
        let kv_lora_rank = self.meta_u32(&rank_key)? as usize;
        if kv_lora_rank == 0 {
            bail!("{path}: {rank_key} is 0: MLA caches a latent of at least one value");
        }
        let q_lora_rank = self
            .meta_u32_opt(&k("attention.q_lora_rank"))?
            .filter(|&r| r > 0)
            .map(|r| r as usize);
        let (key_key, value_key) = match self.meta_u32_opt(&k("attention.key_length_mla"))? {
            Some(_) => (
                k("attention.key_length_mla"),
                k("attention.value_length_mla"),
            ),
            None => (k("attention.key_length"), k("attention.value_length")),
        };
        let key_length = self.meta_u32(&key_key)? as usize;
        let v_head_dim = self.meta_u32(&value_key)? as usize;
        let rope_key = k("rope.dimension_count");
        let rope = self.meta_u32(&rope_key)? as usize;
        if !key_length.is_multiple_of(2) {
            bail!("{path}: {key_key} is {key_length}: an even key width is needed");
        }
        if rope == 0 || !rope.is_multiple_of(2) || rope >= key_length {
            bail!(
                "{path}: {rope_key} is {rope} but {key_key} is {key_length}: the RoPE part must be even, positive and shorter than the key"
            );
        }
        if v_head_dim == 0 {
            bail!("{path}: {value_key} is 0");
        }
        let max = crate::model::config::mla::MAX_MLA_WIDTH;
        for (key, n) in [
            (&rank_key, kv_lora_rank),
            (&key_key, key_length),
            (&value_key, v_head_dim),
        ] {
            if n > max {
                bail!("{path}: {key} is {n}, more than {max}: not a real model");
            }
        }
        let mla = MlaConfig {
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim: key_length - rope,
            qk_rope_head_dim: rope,
            v_head_dim,
            score_factor: 1.0,
        };
        Ok((mla, key_length))
    }

    /// DeepSeek's YaRN as HF computes it from a file's `yarn_log_multiplier` (`0.1 ·
    /// mscale_all_dim`): cos and sin unscaled (`mscale = mscale_all_dim` in every DeepSeek
    /// config), scores times `(0.1 · mscale_all_dim · ln(factor) + 1)²`. Returns the score
    /// factor; without YaRN or the key, 1 and `scaling` unchanged.
    pub(super) fn deepseek_yarn(&self, arch: &str, scaling: &mut RopeScaling) -> Result<f64> {
        let key = format!("{arch}.rope.scaling.yarn_log_multiplier");
        let (RopeScaling::Yarn(y), Some(log_mul)) = (scaling, self.meta_number(&key)?) else {
            return Ok(1.0);
        };
        // DeepSeek's configs have mscale_all_dim ≤ 1 (0.1 here); 10 keeps the score factor
        // far inside f32 for any context.
        if !(log_mul.is_finite() && (0.0..=MAX_YARN_LOG_MULTIPLIER).contains(&log_mul)) {
            bail!(
                "{}: {key} is {log_mul}, expected a number from 0 to {MAX_YARN_LOG_MULTIPLIER}",
                self.path
            );
        }
        let all = log_mul / 0.1;
        y.attention_factor = None;
        y.mscale = Some(all);
        y.mscale_all_dim = Some(all);
        let m = match y.factor > 1.0 {
            true => 0.1 * all * y.factor.ln() + 1.0,
            false => 1.0,
        };
        Ok(m * m)
    }

    /// A `deepseek2` file's mixture of experts. Errors: a missing count, a gating function
    /// other than softmax (1) or sigmoid (2), numbers [`MoeConfig::validate`] refuses.
    pub(super) fn deepseek_moe(&self, arch: &str, layers: usize) -> Result<MoeConfig> {
        let k = |s: &str| format!("{arch}.{s}");
        let path = &self.path;
        let count_key = k("expert_count");
        let used_key = k("expert_used_count");
        let ffn_key = k("expert_feed_forward_length");
        let gating_key = k("expert_gating_func");
        let scoring = match self.meta_u32_opt(&gating_key)? {
            None | Some(1) => MoeScoring::Softmax,
            Some(2) => MoeScoring::Sigmoid,
            Some(g) => bail!(
                "{path}: {gating_key} is {g}: a gating function nanollm does not know (1 softmax and 2 sigmoid are)"
            ),
        };
        let scale_key = k("expert_weights_scale");
        // 0 or absent means 1, as llama.cpp reads it.
        let scale = self
            .meta_number(&scale_key)?
            .filter(|&s| s != 0.0)
            .unwrap_or(1.0);
        if !(scale.is_finite() && scale > 0.0 && scale <= f32::MAX as f64) {
            bail!("{path}: {scale_key} is {scale}, expected a positive number");
        }
        let norm = match self.content.metadata.get(&k("expert_weights_norm")) {
            None => false,
            Some(candle_core::quantized::gguf_file::Value::Bool(b)) => *b,
            Some(_) => bail!("{path}: {} is not a bool", k("expert_weights_norm")),
        };
        let dense_key = k("leading_dense_block_count");
        let dense = self.meta_u32_opt(&dense_key)?.unwrap_or(0) as usize;
        if dense > layers {
            bail!("{path}: {dense_key} is {dense}, more than the {layers} layers");
        }
        let count = self.meta_u32(&count_key)? as usize;
        let (group_key, group_used_key) = (k("expert_group_count"), k("expert_group_used_count"));
        // 0 or absent: no groups (llama.cpp's reading).
        let groups = self.meta_u32_opt(&group_key)?.unwrap_or(1).max(1) as usize;
        let groups_used = self.meta_u32_opt(&group_used_key)?.unwrap_or(1).max(1) as usize;
        if groups > 1 && (!count.is_multiple_of(groups) || groups_used > groups) {
            bail!(
                "{path}: {group_key} {groups} and {group_used_key} {groups_used} with {count_key} {count}: the groups must divide the experts and at most all of them be kept"
            );
        }
        let moe = MoeConfig {
            num_experts: count,
            num_experts_per_tok: self.meta_u32(&used_key)? as usize,
            moe_intermediate_size: self.meta_u32(&ffn_key)? as usize,
            norm_topk_prob: norm,
            num_shared_experts: self.meta_u32_opt(&k("expert_shared_count"))?.unwrap_or(0) as usize,
            scoring,
            routed_scaling_factor: scale as f32,
            n_group: groups,
            topk_group: groups_used,
            first_k_dense_replace: dense,
        };
        moe.validate(&count_key, &used_key, &ffn_key)
            .with_context(|| path.clone())?;
        Ok(moe)
    }
}
