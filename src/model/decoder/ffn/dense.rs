//! The dense gated MLP (Shazeer 2020, "GLU Variants Improve Transformer"):
//! `down(act(gate(x)) · up(x))` with SiLU (SwiGLU, the Llama family) or GELU-tanh (GeGLU,
//! Gemma), the activation named by `ModelConfig::hidden_act`.
use crate::kernels::matmul::QuantMatrix;
use crate::model::config::HiddenAct;
use crate::model::decoder::pass::LayerPass;
use crate::model::linear::{project_mask, Linear};
use crate::model::ops;
use candle_core::Result;

/// A dense gated MLP's weights (names as in HF Llama).
#[derive(Debug, Clone)]
pub struct DenseFfn {
    /// `[intermediate_size, hidden_size]`.
    pub gate_proj: Linear,
    /// `[intermediate_size, hidden_size]`.
    pub up_proj: Linear,
    /// `[hidden_size, intermediate_size]`.
    pub down_proj: Linear,
}

impl DenseFfn {
    /// `h`: `[Σ n, hidden_size]` → `[Σ n, hidden_size]`; gate and up in one pass over the
    /// rows (each row on its own kernel class, `pass.dense`).
    pub fn forward(&self, pass: &LayerPass, h: &[f32]) -> Result<Vec<f32>> {
        let dense = pass.dense;
        let mut gate_up = project_mask(&[&self.gate_proj, &self.up_proj], h, dense)?;
        let up = gate_up.pop().unwrap_or_default();
        let mut gate = gate_up.pop().unwrap_or_default();
        activate(pass.config.hidden_act, &mut gate, &up);
        self.down_proj.forward_mask(&gate, dense)
    }

    /// The three matrices on our quantized kernels with their biases, when all three have
    /// such a matrix and none a prefill copy (every row then takes the quantized kernels, as
    /// [`Linear::forward_mask`] would send it): what the experts' one-region path
    /// ([`super::moe`]) runs on.
    pub fn quantized(&self) -> Option<QuantFfn<'_>> {
        fn q(l: &Linear) -> Option<(&QuantMatrix, Option<&[f32]>)> {
            match (&l.quant, l.has_prefill_copy()) {
                (Some(m), false) => Some((m, l.bias.as_deref())),
                _ => None,
            }
        }
        let (gate, up, down) = (q(&self.gate_proj)?, q(&self.up_proj)?, q(&self.down_proj)?);
        Some(QuantFfn {
            mats: [gate.0, up.0, down.0],
            biases: [gate.1, up.1, down.1],
        })
    }

    /// The block's matrices: gate, up, down.
    pub fn matrices(&self) -> Vec<&Linear> {
        vec![&self.gate_proj, &self.up_proj, &self.down_proj]
    }
}

/// A gated MLP's gate, up and down on our quantized kernels, and their biases (gpt-oss).
#[derive(Debug, Clone, Copy)]
pub struct QuantFfn<'a> {
    /// gate `[I, H]`, up `[I, H]`, down `[H, I]`.
    pub mats: [&'a QuantMatrix; 3],
    /// Their biases, `[I]`, `[I]`, `[H]`, where they have one.
    pub biases: [Option<&'a [f32]>; 3],
}

/// `gate ← act(gate) · up`, elementwise (`gate`, `up`: the same length), the activation
/// `config.hidden_act` names (SiLU: SwiGLU; GELU-tanh: GeGLU).
pub fn activate(act: HiddenAct, gate: &mut [f32], up: &[f32]) {
    match act {
        HiddenAct::Silu => ops::silu_mul(gate, up),
        HiddenAct::GeluTanh => ops::gelu_tanh_mul(gate, up),
        HiddenAct::SwigluOai => ops::swiglu_oai_mul(gate, up),
    }
}
