//! Activations quantized to Q8_1 for the quantized matrix-vector kernels ([`super::quant`]).
//!
//! ggml's `quantize_row_q8_1` (ggml-quants.c): per block of 32 values, `d = max|x| / 127`,
//! `q[j] = round(x[j] / d)` as i8, and `s = d · Σ q[j]` (used by Q4_1's offset term).
use super::quant::QK;

/// Activations quantized to Q8_1: per block a scale, `d · Σ q`, and 32 signed bytes.
#[derive(Debug, Clone, Default)]
pub struct Q8_1Vector {
    /// Per block: scale.
    pub(crate) d: Vec<f32>,
    pub(crate) s: Vec<f32>,
    pub(crate) qs: Vec<[i8; 32]>,
}

impl Q8_1Vector {
    /// Quantize `x` (length a multiple of 32) per block of 32, as ggml's `quantize_row_q8_1`.
    pub fn quantize(x: &[f32]) -> Q8_1Vector {
        let blocks = x.len() / QK;
        let mut v = Q8_1Vector {
            d: Vec::with_capacity(blocks),
            s: Vec::with_capacity(blocks),
            qs: Vec::with_capacity(blocks),
        };
        for block in x.chunks_exact(QK) {
            let amax = block.iter().fold(0f32, |a, &b| a.max(b.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut q = [0i8; 32];
            let mut sum = 0i32;
            for (o, &xv) in q.iter_mut().zip(block) {
                *o = (xv * id).round() as i8;
                sum += *o as i32;
            }
            v.d.push(d);
            v.s.push(d * sum as f32);
            v.qs.push(q);
        }
        v
    }
}
