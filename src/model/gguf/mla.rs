//! An MLA block from a `deepseek2` GGUF: `attn_q` (or `attn_q_a`, `attn_q_a_norm`,
//! `attn_q_b`), `attn_kv_a_mqa`, `attn_kv_a_norm`, `attn_output`, and the latent's up-maps:
//! `attn_k_b` (`[heads, kv_lora_rank, qk_nope]`, `W_UKᵀ` per head) and `attn_v_b` (`[heads,
//! v_head_dim, kv_lora_rank]`), as llama.cpp's converter splits them, or the older fused
//! `attn_kv_b` (`[heads · (qk_nope + v_head_dim), kv_lora_rank]`, HF's `kv_b_proj`).
use super::GgufFile;
use crate::kernels::gemm::DenseMatrix;
use crate::model::config::ModelConfig;
use crate::model::decoder::attention::{split_kv_b, Mla, MlaQuery};
use anyhow::{bail, Context, Result};
use candle_core::Device;

impl GgufFile {
    /// The MLA block of layer `p` (`blk.N`). Errors: a config without MLA, a missing or
    /// misshapen tensor (named; neither `attn_k_b` nor `attn_kv_b` names the first).
    pub(super) fn mla_block(
        &mut self,
        p: &str,
        config: &ModelConfig,
        device: &Device,
    ) -> Result<Mla> {
        let m = config
            .mla
            .with_context(|| format!("{}: the architecture needs an MLA config", self.path))?;
        let (h, heads) = (config.hidden_size, config.num_attention_heads);
        let (lora, nope, vd) = (m.kv_lora_rank, m.qk_nope_head_dim, m.v_head_dim);
        let qd = m.q_head_dim();
        let q = match m.q_lora_rank {
            None => MlaQuery::Plain(self.linear(
                &format!("{p}.attn_q"),
                (heads * qd, h),
                false,
                device,
            )?),
            Some(r) => MlaQuery::LowRank {
                a: self.linear(&format!("{p}.attn_q_a"), (r, h), false, device)?,
                norm: self.vector(&format!("{p}.attn_q_a_norm.weight"), r, device)?,
                b: self.linear(&format!("{p}.attn_q_b"), (heads * qd, r), false, device)?,
            },
        };
        let kv_a_proj = self.linear(
            &format!("{p}.attn_kv_a_mqa"),
            (m.latent_width(), h),
            false,
            device,
        )?;
        let kv_a_norm = self.vector(&format!("{p}.attn_kv_a_norm.weight"), lora, device)?;
        let o_proj = self.linear(&format!("{p}.attn_output"), (h, heads * vd), false, device)?;
        let (k_b_name, v_b_name) = (format!("{p}.attn_k_b"), format!("{p}.attn_v_b"));
        let fused = format!("{p}.attn_kv_b.weight");
        let split = self.dims_of(&format!("{k_b_name}.weight")).is_some();
        let (k_b, v_b, w_uk, w_uv) = if split {
            let k_b = self.experts(&k_b_name, (heads, lora, nope), false, device)?;
            let v_b = self.experts(&v_b_name, (heads, vd, lora), false, device)?;
            // W_UK stacked: row h·nope + i, column c = attn_k_b[h][c][i].
            let kb = self.vector_any(&format!("{k_b_name}.weight"), heads * lora * nope, device)?;
            let mut w_uk = vec![0f32; heads * nope * lora];
            for hh in 0..heads {
                for c in 0..lora {
                    for i in 0..nope {
                        w_uk[(hh * nope + i) * lora + c] = kb[(hh * lora + c) * nope + i];
                    }
                }
            }
            let w_uv = self.vector_any(&format!("{v_b_name}.weight"), heads * vd * lora, device)?;
            (k_b, v_b, w_uk, w_uv)
        } else if self.dims_of(&fused).is_some() {
            let rows = heads * (nope + vd);
            self.check_shape(&fused, &[rows, lora])?;
            let all = self.vector_any(&fused, rows * lora, device)?;
            split_kv_b(&all, (heads, nope, vd, lora), device)?
        } else {
            bail!(
                "{}: tensor {k_b_name}.weight is missing (and there is no older fused {fused}): MLA needs the latent's up-projections",
                self.path
            );
        };
        Ok(Mla {
            q,
            kv_a_proj,
            kv_a_norm,
            k_b,
            v_b,
            k_up: DenseMatrix::pack(&w_uk, heads * nope, lora)?,
            v_up: DenseMatrix::pack(&w_uv, heads * vd, lora)?,
            o_proj,
        })
    }
}
