//! The chosen experts of a step in two parallel regions (gate and up of every chosen
//! expert, then every down), each expert on the rows routed to it, when all experts are on
//! our quantized kernels (GGUF files): one region per expert and matrix was 16 regions per
//! layer for a decode row of Qwen3-30B-A3B's 8 experts.
use crate::kernels::matmul::{matmul_sets, QuantMatrix};
use crate::model::decoder::ffn::dense::{activate, DenseFfn};
use crate::model::decoder::pass::LayerPass;
use candle_core::Result;

/// Per expert, its gate, up and down on our quantized kernels, when every chosen expert
/// (one with members) has them ([`DenseFfn::quantized`]); None sends the step down the
/// expert-by-expert path. Unchosen experts get None either way.
pub(super) fn quantized_experts<'a>(
    experts: &'a [DenseFfn],
    members: &[Vec<(usize, usize)>],
) -> Option<Vec<Option<[&'a QuantMatrix; 3]>>> {
    experts
        .iter()
        .zip(members)
        .map(|(e, m)| match m.is_empty() {
            true => Some(None),
            false => e.quantized().map(Some),
        })
        .collect()
}

/// The rows `m` (`(row, slot)` pairs) of `h` (`[rows, width]`), in order: `[m.len(), width]`.
pub(super) fn gather(h: &[f32], m: &[(usize, usize)], width: usize) -> Vec<f32> {
    let mut xs = Vec::with_capacity(m.len() * width);
    for &(row, _) in m {
        xs.extend_from_slice(&h[row * width..(row + 1) * width]);
    }
    xs
}

/// Per expert, its output on its member rows, `[members[e].len(), width]` (empty where no
/// row chose it): the bits [`DenseFfn::forward`] gives on the quantized kernels, since every
/// row is computed alone by the same kernels (design rule R1).
///
/// Errors: rows not of the experts' width (kernel errors).
pub(super) fn run(
    pass: &LayerPass,
    mats: &[Option<[&QuantMatrix; 3]>],
    members: &[Vec<(usize, usize)>],
    h: &[f32],
    width: usize,
) -> Result<Vec<Vec<f32>>> {
    let chosen: Vec<usize> = (0..mats.len()).filter(|&e| mats[e].is_some()).collect();
    let xs: Vec<Vec<f32>> = chosen
        .iter()
        .map(|&e| gather(h, &members[e], width))
        .collect();
    let gate_up: Vec<[&QuantMatrix; 2]> = chosen
        .iter()
        .filter_map(|&e| mats[e].map(|[g, u, _]| [g, u]))
        .collect();
    let sets: Vec<(&[&QuantMatrix], &[f32])> = gate_up
        .iter()
        .zip(&xs)
        .map(|(m, x)| (&m[..], &x[..]))
        .collect();
    let mut acts = Vec::with_capacity(chosen.len());
    for mut gu in matmul_sets(&sets).map_err(err)? {
        let up = gu.pop().unwrap_or_default();
        let mut gate = gu.pop().unwrap_or_default();
        activate(pass.config.hidden_act, &mut gate, &up);
        acts.push(gate);
    }
    let downs: Vec<[&QuantMatrix; 1]> = chosen
        .iter()
        .filter_map(|&e| mats[e].map(|[_, _, d]| [d]))
        .collect();
    let sets: Vec<(&[&QuantMatrix], &[f32])> = downs
        .iter()
        .zip(&acts)
        .map(|(m, a)| (&m[..], &a[..]))
        .collect();
    let mut ys = vec![Vec::new(); mats.len()];
    for (&e, mut y) in chosen.iter().zip(matmul_sets(&sets).map_err(err)?) {
        ys[e] = y.pop().unwrap_or_default();
    }
    Ok(ys)
}

fn err(e: anyhow::Error) -> candle_core::Error {
    candle_core::Error::Msg(format!("{e:#}"))
}
