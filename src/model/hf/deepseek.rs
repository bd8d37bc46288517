//! DeepSeek-V2/V3's config.json (transformers' `DeepseekV2Config`, `DeepseekV3Config`; the
//! checkpoints' own `configuration_deepseek.py`): multi-head latent attention and the
//! mixture of experts with shared experts, a softmax (V2) or sigmoid (V3) router, expert
//! groups and the routed scaling factor.
use crate::model::config::mla::MAX_MLA_WIDTH;
use crate::model::config::{MlaConfig, MoeConfig, MoeScoring};
use crate::model::hf::fields::Fields;
use crate::model::rope::RopeScaling;
use anyhow::{bail, Result};

/// The MLA shape and the key width (`qk_nope_head_dim + qk_rope_head_dim`, the config's
/// `head_dim`). The score factor is YaRN's `mscale(factor, mscale_all_dim)²` (HF
/// `softmax_scale`). Errors: a missing or zero dimension (named), `attention_bias` true.
pub fn mla(f: &Fields, scaling: &RopeScaling) -> Result<(MlaConfig, usize)> {
    if f.opt_bool("attention_bias")?.unwrap_or(false) {
        bail!("attention_bias is true: biased MLA projections are not supported");
    }
    let kv_lora_rank = f.usize("kv_lora_rank")?;
    if kv_lora_rank == 0 {
        bail!("kv_lora_rank is 0: MLA caches a latent of at least one value");
    }
    let nope = f.usize("qk_nope_head_dim")?;
    let rope = f.usize("qk_rope_head_dim")?;
    if rope == 0 || !rope.is_multiple_of(2) || nope == 0 {
        bail!("qk_rope_head_dim {rope} and qk_nope_head_dim {nope}: both must be positive, the RoPE part even");
    }
    // The attention kernels take even head widths; the RoPE part already is.
    if !nope.is_multiple_of(2) {
        bail!("qk_nope_head_dim is {nope}: an even width is needed (the key is {nope} + {rope} values)");
    }
    for (name, n) in [
        ("kv_lora_rank", kv_lora_rank),
        ("qk_nope_head_dim", nope),
        ("qk_rope_head_dim", rope),
    ] {
        if n > MAX_MLA_WIDTH {
            bail!("{name} is {n}, more than {MAX_MLA_WIDTH}: not a real model");
        }
    }
    let score_factor = match scaling {
        RopeScaling::Yarn(y) => match y.mscale_all_dim {
            Some(all) if !(all.is_finite() && (0.0..=100.0).contains(&all)) => {
                bail!("rope_scaling.mscale_all_dim is {all}, expected a number from 0 to 100")
            }
            Some(all) if all != 0.0 && y.factor > 1.0 => (0.1 * all * y.factor.ln() + 1.0).powi(2),
            _ => 1.0,
        },
        _ => 1.0,
    };
    let m = MlaConfig {
        q_lora_rank: f.opt_usize("q_lora_rank")?,
        kv_lora_rank,
        qk_nope_head_dim: nope,
        qk_rope_head_dim: rope,
        v_head_dim: f.usize("v_head_dim")?,
        score_factor,
    };
    Ok((m, nope + rope))
}

/// The mixture of experts (`n_routed_experts`, `num_experts_per_tok`,
/// `moe_intermediate_size`, `n_shared_experts`, `first_k_dense_replace`, `norm_topk_prob`,
/// `routed_scaling_factor`, `scoring_func`, `topk_method`, `n_group`, `topk_group`).
/// `None` without routed experts. Errors: a `moe_layer_freq` other than 1, an unknown
/// scoring function or top-k method, numbers [`MoeConfig::validate`] refuses.
///
/// V2 (`v3` false) scales the weights only when it does not renormalize them
/// (`DeepseekV2MoEGate`); V3 renormalizes, then scales.
pub fn moe(f: &Fields, layers: usize, v3: bool) -> Result<Option<MoeConfig>> {
    let Some(num_experts) = f.opt_usize("n_routed_experts")? else {
        return Ok(None);
    };
    if f.opt_usize("moe_layer_freq")?.unwrap_or(1) != 1 {
        bail!("moe_layer_freq is not 1: only experts in every layer after the dense ones are supported");
    }
    let scoring = match f.opt_str("scoring_func")?.unwrap_or("softmax") {
        "softmax" => MoeScoring::Softmax,
        "sigmoid" => MoeScoring::Sigmoid,
        other => bail!("scoring_func is {other:?}: a gating function nanollm does not know (softmax and sigmoid are)"),
    };
    let grouped = match f.opt_str("topk_method")?.unwrap_or("greedy") {
        "greedy" => false,
        "group_limited_greedy" | "noaux_tc" => true,
        other => bail!("topk_method is {other:?}: not supported (greedy, group_limited_greedy and noaux_tc are)"),
    };
    let (n_group, topk_group) = match grouped {
        true => (
            f.opt_usize("n_group")?.unwrap_or(1).max(1),
            f.opt_usize("topk_group")?.unwrap_or(1).max(1),
        ),
        false => (1, 1),
    };
    let norm = f.opt_bool("norm_topk_prob")?.unwrap_or(false);
    let scale = match (v3, norm) {
        (false, true) => 1.0,
        _ => f.opt_f64("routed_scaling_factor")?.unwrap_or(1.0),
    };
    let m = MoeConfig {
        num_experts,
        num_experts_per_tok: f.usize("num_experts_per_tok")?,
        moe_intermediate_size: f.usize("moe_intermediate_size")?,
        norm_topk_prob: norm,
        num_shared_experts: f.opt_usize("n_shared_experts")?.unwrap_or(0),
        scoring,
        routed_scaling_factor: scale as f32,
        n_group,
        topk_group,
        first_k_dense_replace: match f.opt_usize("first_k_dense_replace")?.unwrap_or(0) {
            d if d > layers => {
                bail!("first_k_dense_replace is {d}, more than the {layers} layers")
            }
            d => d,
        },
    };
    m.validate(
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
    )?;
    Ok(Some(m))
}
