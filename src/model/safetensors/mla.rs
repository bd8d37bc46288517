//! An MLA block from a DeepSeek checkpoint, in transformers' names: `self_attn.q_proj` (or
//! `q_a_proj`, `q_a_layernorm`, `q_b_proj`), `kv_a_proj_with_mqa`, `kv_a_layernorm`,
//! `kv_b_proj` (`[heads · (qk_nope + v_head_dim), kv_lora_rank]`: per head its `W_UK` rows,
//! then its `W_UV` rows) and `o_proj`.
use super::{Checkpoint, Quantize};
use crate::kernels::gemm::DenseMatrix;
use crate::model::config::ModelConfig;
use crate::model::decoder::attention::{split_kv_b, Mla, MlaQuery};
use crate::model::finite::finite;
use anyhow::{Context, Result};
use candle_core::Device;

impl Checkpoint {
    /// The MLA block of layer `p` (`model.layers.N`). `kv_b_proj` is split per head into
    /// `W_UKᵀ_h` and `W_UV_h` (f32 on candle's kernels, for the absorbed path) and kept
    /// stacked, packed for the expanded path. Errors: a missing or misshapen tensor (named).
    pub(super) fn mla_block(
        &self,
        p: &str,
        c: &ModelConfig,
        device: &Device,
        q: Quantize,
    ) -> Result<Mla> {
        let m = c.mla.context("config.json gives no MLA shape")?;
        let (h, heads) = (c.hidden_size, c.num_attention_heads);
        let (lora, nope, vd) = (m.kv_lora_rank, m.qk_nope_head_dim, m.v_head_dim);
        let qd = m.q_head_dim();
        let lin = |name: &str, shape| {
            self.linear(
                &format!("{p}.self_attn.{name}"),
                shape,
                Some(false),
                device,
                q,
            )
        };
        let query = match m.q_lora_rank {
            None => MlaQuery::Plain(lin("q_proj", (heads * qd, h))?),
            Some(r) => MlaQuery::LowRank {
                a: lin("q_a_proj", (r, h))?,
                norm: self.vector(&format!("{p}.self_attn.q_a_layernorm.weight"), r, device)?,
                b: lin("q_b_proj", (heads * qd, r))?,
            },
        };
        let name = format!("{p}.self_attn.kv_b_proj.weight");
        let rows = heads * (nope + vd);
        let all = self
            .f32(&name, &[rows, lora], device)?
            .flatten_all()?
            .to_vec1()?;
        let all = finite(&self.dir, &name, all)?;
        let (k_b, v_b, w_uk, w_uv) = split_kv_b(&all, (heads, nope, vd, lora), device)?;
        Ok(Mla {
            q: query,
            kv_a_proj: lin("kv_a_proj_with_mqa", (m.latent_width(), h))?,
            kv_a_norm: self.vector(
                &format!("{p}.self_attn.kv_a_layernorm.weight"),
                lora,
                device,
            )?,
            k_b,
            v_b,
            k_up: DenseMatrix::pack(&w_uk, heads * nope, lora)?,
            v_up: DenseMatrix::pack(&w_uv, heads * vd, lora)?,
            o_proj: lin("o_proj", (h, heads * vd))?,
        })
    }
}
