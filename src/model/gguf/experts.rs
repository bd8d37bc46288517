//! A mixture-of-experts block from a GGUF: the router `blk.N.ffn_gate_inp` and the expert
//! tensors `blk.N.ffn_{gate,up,down}_exps` (`[experts, rows, cols]`), split per expert.
use super::GgufFile;
use crate::model::config::{Architecture, ModelConfig};
use crate::model::decoder::ffn::{DenseFfn, MoeFfn};
use crate::model::linear::Linear;
use anyhow::{bail, Result};
use candle_core::Device;

impl GgufFile {
    /// The experts of `{name}.weight`, an `[experts, rows, cols]` tensor, one [`Linear`]
    /// each (our kernels' blocks, no prefill copy: an expert sees a few rows per step, and
    /// an f32 copy of every expert would not fit beside the model), with `bias`, each
    /// expert's row of `{name}.bias` (`[experts, rows]`). Errors: missing, or another shape.
    pub(super) fn experts(
        &mut self,
        name: &str,
        (experts, rows, cols): (usize, usize, usize),
        bias: bool,
        device: &Device,
    ) -> Result<Vec<Linear>> {
        let full = format!("{name}.weight");
        self.check_shape(&full, &[experts, rows, cols])?;
        let biases = match bias {
            true => {
                let b = format!("{name}.bias");
                self.check_shape(&b, &[experts, rows])?;
                let all = self.vector_any(&b, experts * rows, device)?;
                all.chunks_exact(rows.max(1))
                    .map(|r| Some(r.to_vec()))
                    .collect()
            }
            false => vec![None; experts],
        };
        let mut linears: Vec<Linear> = match self.our_matrices(&full, experts, (rows, cols))? {
            Some(mats) => mats
                .into_iter()
                .map(|m| Linear::on_kernels(m, None))
                .collect(),
            // candle's f32 path (CANDLE_DEQUANTIZE_ALL): one f32 matrix per expert.
            None => {
                let all = self.qtensor(&full, device)?.dequantize(device)?;
                (0..experts)
                    .map(|e| Ok(Linear::dense_f32(all.get(e)?.contiguous()?, None)))
                    .collect::<Result<Vec<_>>>()?
            }
        };
        for (l, b) in linears.iter_mut().zip(biases) {
            l.bias = b;
        }
        Ok(linears)
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
        // gpt-oss biases the router and every expert's matrices (`{name}.bias`, `[E, rows]`).
        let bias = config.architecture == Architecture::GptOss;
        let router = self.linear(&format!("{p}.ffn_gate_inp"), (e, h), bias, device)?;
        let gates = self.experts(&format!("{p}.ffn_gate_exps"), (e, f, h), bias, device)?;
        let ups = self.experts(&format!("{p}.ffn_up_exps"), (e, f, h), bias, device)?;
        let downs = self.experts(&format!("{p}.ffn_down_exps"), (e, h, f), bias, device)?;
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
        let block = MoeFfn::new(router, experts, m.num_experts_per_tok, m.norm_topk_prob);
        if config.architecture != Architecture::DeepSeek2 {
            return Ok(block);
        }
        // DeepSeek: shared experts as one MLP of n · moe_ff, the V3 router's selection bias.
        let shared = match m.num_shared_experts {
            0 => None,
            n => {
                let fs = n * f;
                Some(DenseFfn {
                    gate_proj: self.linear(
                        &format!("{p}.ffn_gate_shexp"),
                        (fs, h),
                        false,
                        device,
                    )?,
                    up_proj: self.linear(&format!("{p}.ffn_up_shexp"), (fs, h), false, device)?,
                    down_proj: self.linear(
                        &format!("{p}.ffn_down_shexp"),
                        (h, fs),
                        false,
                        device,
                    )?,
                })
            }
        };
        let bias_name = format!("{p}.exp_probs_b.bias");
        let bias = match self.dims_of(&bias_name) {
            Some(_) => Some(self.vector(&bias_name, e, device)?),
            None => None,
        };
        Ok(block.with_deepseek(&m, shared, bias))
    }
}
