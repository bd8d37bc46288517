//! A mixture-of-experts block from a checkpoint, in transformers' names and layouts:
//! Qwen3-MoE `mlp.gate` and `mlp.experts.E.{gate,up,down}_proj`; Mixtral
//! `block_sparse_moe.gate` and `…experts.E.{w1,w3,w2}`; gpt-oss `mlp.router` (biased) and
//! the fused `mlp.experts.gate_up_proj` `[E, hidden, 2F]` (gate and up interleaved, gate
//! the even columns), `gate_up_proj_bias` `[E, 2F]`, `down_proj` `[E, F, hidden]`,
//! `down_proj_bias` `[E, hidden]` — or, as gpt-oss ships, `{gate_up,down}_proj_{blocks,
//! scales}` in MXFP4 (`mxfp4.rs`), whose rows are the output features. Source: transformers
//! `GptOssExperts`; llama.cpp's converter (conversion/gpt_oss.py) reads them the same way.
use super::mxfp4::every_other_row;
use super::{Checkpoint, Quantize};
use crate::kernels::matmul::QuantMatrix;
use crate::model::config::{Architecture, ModelConfig};
use crate::model::decoder::ffn::{DenseFfn, MoeFfn};
use crate::model::finite::finite;
use crate::model::linear::Linear;
use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};

impl Checkpoint {
    /// The mixture-of-experts block of layer `p` (`model.layers.N`). Errors: a missing or
    /// misshapen tensor (named).
    pub(super) fn moe_block(
        &self,
        p: &str,
        c: &ModelConfig,
        device: &Device,
        q: Quantize,
    ) -> Result<MoeFfn> {
        let Some(m) = c.moe else {
            bail!("{}: config.json gives no experts", self.dir);
        };
        let (e, f, h) = (m.num_experts, m.moe_intermediate_size, c.hidden_size);
        let lin =
            |name: &str, shape, bias| self.linear(&format!("{p}.{name}"), shape, bias, device, q);
        let (router, experts) = match c.architecture {
            Architecture::GptOss => (
                lin("mlp.router", (e, h), Some(true))?,
                self.fused_experts(&format!("{p}.mlp.experts"), (e, f, h), device, q)?,
            ),
            arch => {
                let (block, [gate, up, down]) = match arch {
                    Architecture::Mixtral => ("block_sparse_moe", ["w1", "w3", "w2"]),
                    _ => ("mlp", ["gate_proj", "up_proj", "down_proj"]),
                };
                let experts = (0..e)
                    .map(|x| {
                        let name = |w: &str| format!("{block}.experts.{x}.{w}");
                        Ok(DenseFfn {
                            gate_proj: lin(&name(gate), (f, h), Some(false))?,
                            up_proj: lin(&name(up), (f, h), Some(false))?,
                            down_proj: lin(&name(down), (h, f), Some(false))?,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                (lin(&format!("{block}.gate"), (e, h), Some(false))?, experts)
            }
        };
        let block = MoeFfn::new(router, experts, m.num_experts_per_tok, m.norm_topk_prob);
        if c.architecture != Architecture::DeepSeek2 {
            return Ok(block);
        }
        // DeepSeek: `mlp.shared_experts` (one MLP of n · moe_intermediate_size) and V3's
        // `mlp.gate.e_score_correction_bias`.
        let shared = match m.num_shared_experts {
            0 => None,
            n => Some(DenseFfn {
                gate_proj: lin("mlp.shared_experts.gate_proj", (n * f, h), Some(false))?,
                up_proj: lin("mlp.shared_experts.up_proj", (n * f, h), Some(false))?,
                down_proj: lin("mlp.shared_experts.down_proj", (h, n * f), Some(false))?,
            }),
        };
        let bias_name = format!("{p}.mlp.gate.e_score_correction_bias");
        let bias = match self.contains(&bias_name) {
            true => Some(self.vector(&bias_name, e, device)?),
            false => None,
        };
        Ok(block.with_deepseek(&m, shared, bias))
    }

    /// gpt-oss's experts under `p` (`model.layers.N.mlp.experts`), `e` of them with `f`
    /// intermediate features over `h` hidden ones: MXFP4 on our kernels as shipped, or
    /// dense (a bf16 checkpoint) as every other matrix here (f32, or `--quantize`).
    fn fused_experts(
        &self,
        p: &str,
        (e, f, h): (usize, usize, usize),
        device: &Device,
        q: Quantize,
    ) -> Result<Vec<DenseFfn>> {
        let biases = |name: &str, n: usize| -> Result<Vec<Vec<f32>>> {
            let full = format!("{p}.{name}");
            let all = self.f32(&full, &[e, n], device)?.flatten_all()?.to_vec1()?;
            let all = finite(&self.dir, &full, all)?;
            Ok(all.chunks_exact(n.max(1)).map(<[f32]>::to_vec).collect())
        };
        let gate_up_bias = biases("gate_up_proj_bias", 2 * f)?;
        let down_bias = biases("down_proj_bias", h)?;
        // Column 2i of the fused gate/up is the gate's i, column 2i + 1 the up's.
        let split = |b: &[f32], first: usize| b.iter().skip(first).step_by(2).copied().collect();
        let mut out = Vec::with_capacity(e);
        if self.has_mxfp4(&format!("{p}.gate_up_proj")) {
            let gate_up = self.mxfp4_experts(&format!("{p}.gate_up_proj"), (e, 2 * f, h))?;
            let down = self.mxfp4_experts(&format!("{p}.down_proj"), (e, h, f))?;
            let row_bytes = h / 32 * 17;
            for x in 0..e {
                let what = |n: &str| format!("{}: {p}.{n}, expert {x}", self.dir);
                let matrix = |bytes: &[u8], rows, cols, n: &str| {
                    QuantMatrix::from_file_mxfp4_bytes(bytes, rows, cols).with_context(|| what(n))
                };
                let gate = matrix(
                    &every_other_row(&gate_up[x], row_bytes, 0),
                    f,
                    h,
                    "gate_up_proj",
                )?;
                let up = matrix(
                    &every_other_row(&gate_up[x], row_bytes, 1),
                    f,
                    h,
                    "gate_up_proj",
                )?;
                out.push(DenseFfn {
                    gate_proj: Linear::on_kernels(gate, Some(split(&gate_up_bias[x], 0))),
                    up_proj: Linear::on_kernels(up, Some(split(&gate_up_bias[x], 1))),
                    down_proj: Linear::on_kernels(
                        matrix(&down[x], h, f, "down_proj")?,
                        Some(down_bias[x].clone()),
                    ),
                });
            }
            return Ok(out);
        }
        let gate_up = self.f32(&format!("{p}.gate_up_proj"), &[e, h, 2 * f], device)?;
        let down = self.f32(&format!("{p}.down_proj"), &[e, f, h], device)?;
        let rows = |first: u32| {
            let idx: Vec<u32> = (0..f as u32).map(|i| 2 * i + first).collect();
            Tensor::new(idx, device)
        };
        let (gate_rows, up_rows) = (rows(0)?, rows(1)?);
        for x in 0..e {
            // transformers multiplies x · W (`[h, 2f]`): our matrices are `[out, in]`.
            let fused = gate_up.get(x)?.t()?.contiguous()?;
            let name = |n: &str| format!("{p}.{n}.{x}");
            let gate = fused.index_select(&gate_rows, 0)?.contiguous()?;
            let up = fused.index_select(&up_rows, 0)?.contiguous()?;
            let down_w = down.get(x)?.t()?.contiguous()?;
            out.push(DenseFfn {
                gate_proj: self.finish_linear(
                    &name("gate_proj"),
                    gate,
                    Some(split(&gate_up_bias[x], 0)),
                    q,
                )?,
                up_proj: self.finish_linear(
                    &name("up_proj"),
                    up,
                    Some(split(&gate_up_bias[x], 1)),
                    q,
                )?,
                down_proj: self.finish_linear(
                    &name("down_proj"),
                    down_w,
                    Some(down_bias[x].clone()),
                    q,
                )?,
            });
        }
        Ok(out)
    }
}
