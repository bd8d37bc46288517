//! A mixture-of-experts block from a GGUF: the router `blk.N.ffn_gate_inp` and the expert
//! tensors `blk.N.ffn_{gate,up,down}_exps` (`[experts, rows, cols]`), split per expert.
use super::header::ForeignType;
use super::matrices::expert_matrices;
use super::GgufFile;
use crate::kernels::matmul::QuantMatrix;
use crate::model::config::{Architecture, ModelConfig};
use crate::model::decoder::ffn::{DenseFfn, MoeFfn};
use crate::model::linear::Linear;
use anyhow::{bail, Context, Result};
use candle_core::Device;

impl GgufFile {
    /// The experts of `{name}.weight`, an `[experts, rows, cols]` tensor, one [`Linear`]
    /// each (our kernels' blocks, no prefill copy: an expert sees a few rows per step, and
    /// an f32 copy of every expert would not fit beside the model), with `bias`, each
    /// expert's row of `{name}.bias` (`[experts, rows]`). Errors: missing, or another shape.
    fn experts(
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
        let what = format!("{}: {full}", self.path);
        // MXFP4 (gpt-oss as it ships): read by us, on our kernels in every mode.
        let mut linears: Vec<Linear> = match self.foreign_bytes(&full)? {
            Some((ForeignType::Mxfp4, bytes)) => {
                let per = bytes.len() / experts.max(1);
                (0..experts)
                    .map(|e| {
                        let m = QuantMatrix::from_ggml_mxfp4_bytes(
                            &bytes[e * per..(e + 1) * per],
                            rows,
                            cols,
                        )
                        .with_context(|| format!("{what}, expert {e}"))?;
                        Ok(quant_linear(m))
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            None => self.candle_experts(&full, &what, experts, device)?,
        };
        for (l, b) in linears.iter_mut().zip(biases) {
            l.bias = b;
        }
        Ok(linears)
    }

    /// The experts of `full`, a tensor of a type candle reads: on our kernels, or candle's
    /// f32 (`CANDLE_DEQUANTIZE_ALL`).
    fn candle_experts(
        &mut self,
        full: &str,
        what: &str,
        experts: usize,
        device: &Device,
    ) -> Result<Vec<Linear>> {
        let q = self.qtensor(full, device)?;
        Ok(match expert_matrices(&q, what)? {
            Some(mats) => mats.into_iter().map(quant_linear).collect(),
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
        Ok(MoeFfn::new(
            router,
            experts,
            m.num_experts_per_tok,
            m.norm_topk_prob,
        ))
    }
}

/// An expert's matrix on our kernels alone (no prefill copy, no bias yet).
fn quant_linear(m: QuantMatrix) -> Linear {
    Linear {
        weight: None,
        bias: None,
        dense: None,
        quant: Some(m),
        packed: None,
    }
}
