//! A mixture-of-experts block from a GGUF: the router `blk.N.ffn_gate_inp` and the expert
//! tensors `blk.N.ffn_{gate,up,down}_exps` (`[experts, rows, cols]`), split per expert.
use super::matrices::expert_matrices;
use super::GgufFile;
use crate::model::config::ModelConfig;
use crate::model::decoder::ffn::{DenseFfn, MoeFfn};
use crate::model::linear::Linear;
use anyhow::{bail, Result};
use candle_core::Device;

impl GgufFile {
    /// The experts of `{name}.weight`, an `[experts, rows, cols]` tensor, one [`Linear`]
    /// each (our kernels' blocks, no prefill copy: an expert sees a few rows per step, and
    /// an f32 copy of every expert would not fit beside the model). Errors: missing, or
    /// another shape.
    fn experts(
        &mut self,
        name: &str,
        (experts, rows, cols): (usize, usize, usize),
        device: &Device,
    ) -> Result<Vec<Linear>> {
        let full = format!("{name}.weight");
        self.check_shape(&full, &[experts, rows, cols])?;
        let q = self.qtensor(&full, device)?;
        let what = format!("{}: {full}", self.path);
        Ok(match expert_matrices(&q, &what)? {
            Some(mats) => mats
                .into_iter()
                .map(|m| Linear {
                    weight: None,
                    bias: None,
                    dense: None,
                    quant: Some(m),
                    packed: None,
                })
                .collect(),
            // candle's f32 path (CANDLE_DEQUANTIZE_ALL): one f32 matrix per expert.
            None => {
                let all = q.dequantize(device)?;
                (0..experts)
                    .map(|e| Ok(Linear::dense_f32(all.get(e)?.contiguous()?, None)))
                    .collect::<Result<Vec<_>>>()?
            }
        })
    }

    /// A mixture-of-experts block of layer `p` (`blk.N`): the router `ffn_gate_inp` and the
    /// expert tensors. Errors: a missing or misshapen tensor (named).
    pub(super) fn moe_block(
        &mut self,
        p: &str,
        config: &ModelConfig,
        device: &Device,
    ) -> Result<MoeFfn> {
        let Some(m) = config.moe else {
            bail!("{}: the architecture needs expert_count", self.path);
        };
        let (h, e, f) = (config.hidden_size, m.num_experts, m.moe_intermediate_size);
        let router = self.linear(&format!("{p}.ffn_gate_inp"), (e, h), false, device)?;
        let gates = self.experts(&format!("{p}.ffn_gate_exps"), (e, f, h), device)?;
        let ups = self.experts(&format!("{p}.ffn_up_exps"), (e, f, h), device)?;
        let downs = self.experts(&format!("{p}.ffn_down_exps"), (e, h, f), device)?;
        let experts = gates
            .into_iter()
            .zip(ups)
            .zip(downs)
            .map(|((gate_proj, up_proj), down_proj)| DenseFfn {
                gate_proj,
                up_proj,
                down_proj,
            })
            .collect();
        Ok(MoeFfn::new(
            router,
            experts,
            m.num_experts_per_tok,
            m.norm_topk_prob,
        ))
    }
}
