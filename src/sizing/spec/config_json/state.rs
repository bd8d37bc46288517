//! The constant per-sequence state of a layer without KV (linear attention, Mamba), from the
//! config.json fields that size it.
use super::fields::{mul, Fields};
use crate::sizing::spec::Mixer;
use anyhow::{anyhow, Result};

/// Values of constant state per sequence in one no-KV layer, when the config has the fields.
///
/// Linear attention (Qwen3-Next Gated DeltaNet): conv `(2·nk·dk + nv·dv) · (kernel − 1)` plus
/// recurrent `nv · dk · dv` (`linear_num_key_heads`, `linear_key_head_dim`,
/// `linear_num_value_heads`, `linear_value_head_dim`, `linear_conv_kernel_dim`).
/// Mamba (Jamba): `d_inner = mamba_expand · hidden_size`; conv `d_inner · (mamba_d_conv − 1)`
/// plus SSM `d_inner · mamba_d_state`. Mamba-2 (`mamba_n_heads`): conv
/// `(d_inner + 2 · mamba_n_groups · d_state) · (d_conv − 1)` plus SSM
/// `n_heads · mamba_d_head · d_state`. The conv window is `kernel − 1` as vLLM keeps it.
/// A layer sharing an earlier layer's KV (Gemma-3n) holds nothing: 0.
pub(super) fn state_values(
    cfg: &Fields,
    mixer: Mixer,
    hidden: Option<(&str, u64)>,
) -> Result<Option<u64>> {
    let what = "state size";
    match mixer {
        Mixer::SharedKv | Mixer::MlpOnly => Ok(Some(0)),
        Mixer::LinearAttention => {
            let f = |k| cfg.positive(k);
            let (Some(nk), Some(dk), Some(nv), Some(dv), Some(kernel)) = (
                f("linear_num_key_heads")?,
                f("linear_key_head_dim")?,
                f("linear_num_value_heads")?,
                f("linear_value_head_dim")?,
                f("linear_conv_kernel_dim")?,
            ) else {
                return Ok(None);
            };
            let conv_dim = mul(what, 2, mul(what, nk, dk)?)?
                .checked_add(mul(what, nv, dv)?)
                .ok_or_else(|| anyhow!("{what} overflows 64 bits"))?;
            let conv = mul(what, conv_dim, kernel - 1)?;
            let recurrent = mul(what, mul(what, nv, dk)?, dv)?;
            Ok(conv.checked_add(recurrent))
        }
        Mixer::Mamba => {
            let (Some(d_state), Some(d_conv), Some(expand), Some((_, hidden))) = (
                cfg.positive("mamba_d_state")?,
                cfg.positive("mamba_d_conv")?,
                cfg.positive("mamba_expand")?,
                hidden,
            ) else {
                return Ok(None);
            };
            let d_inner = mul(what, expand, hidden)?;
            if let Some(n_heads) = cfg.positive("mamba_n_heads")? {
                let groups = cfg.positive("mamba_n_groups")?.unwrap_or(1);
                let head = cfg.positive("mamba_d_head")?.unwrap_or(d_inner / n_heads);
                let conv_dim = d_inner
                    .checked_add(mul(what, 2, mul(what, groups, d_state)?)?)
                    .ok_or_else(|| anyhow!("{what} overflows 64 bits"))?;
                let conv = mul(what, conv_dim, d_conv - 1)?;
                let ssm = mul(what, mul(what, n_heads, head)?, d_state)?;
                return Ok(conv.checked_add(ssm));
            }
            let conv = mul(what, d_inner, d_conv - 1)?;
            let ssm = mul(what, d_inner, d_state)?;
            Ok(conv.checked_add(ssm))
        }
    }
}
