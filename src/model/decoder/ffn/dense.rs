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

    /// The three matrices on our quantized kernels, when all have them and none a bias or a
    /// prefill copy (every row then takes the quantized kernels, as [`Linear::forward_mask`]
    /// would send it): what the experts' one-region path ([`super::moe`]) runs on.
    pub fn quantized(&self) -> Option<[&QuantMatrix; 3]> {
        fn q(l: &Linear) -> Option<&QuantMatrix> {
            match (&l.quant, &l.bias, l.has_prefill_copy()) {
                (Some(m), None, false) => Some(m),
                _ => None,
            }
        }
        Some([
            q(&self.gate_proj)?,
            q(&self.up_proj)?,
            q(&self.down_proj)?,
        ])
    }

    /// The block's matrices: gate, up, down.
    pub fn matrices(&self) -> Vec<&Linear> {
        vec![&self.gate_proj, &self.up_proj, &self.down_proj]
    }
}

/// `gate ← act(gate) · up`, elementwise (`gate`, `up`: the same length), the activation
/// `config.hidden_act` names (SiLU: SwiGLU; GELU-tanh: GeGLU).
pub fn activate(act: HiddenAct, gate: &mut [f32], up: &[f32]) {
    match act {
        HiddenAct::Silu => ops::silu_mul(gate, up),
        HiddenAct::GeluTanh => ops::gelu_tanh_mul(gate, up),
    }
}
