//! The chosen experts of a step in two parallel regions (gate and up of every chosen
//! expert, then every down), each expert on the rows routed to it, when all experts are on
//! our quantized kernels (GGUF files): one region per expert and matrix was 16 regions per
//! layer for a decode row of Qwen3-30B-A3B's 8 experts.
use crate::kernels::matmul::{matmul_sets, QuantMatrix};
use crate::model::decoder::ffn::dense::{activate, DenseFfn, QuantFfn};
use crate::model::decoder::pass::LayerPass;
use candle_core::Result;

/// Per expert, its gate, up and down on our quantized kernels (and their biases), when every
/// chosen expert (one with members) has them ([`DenseFfn::quantized`]); None sends the step down the
/// expert-by-expert path. Unchosen experts get None either way.
pub(super) fn quantized_experts<'a>(
    experts: &'a [DenseFfn],
    members: &[Vec<(usize, usize)>],
) -> Option<Vec<Option<QuantFfn<'a>>>> {
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
    mats: &[Option<QuantFfn>],
    members: &[Vec<(usize, usize)>],
    h: &[f32],
    width: usize,
) -> Result<Vec<Vec<f32>>> {
    let chosen: Vec<(usize, &QuantFfn)> = mats
        .iter()
        .enumerate()
        .filter_map(|(e, m)| m.as_ref().map(|m| (e, m)))
        .collect();
    let xs: Vec<Vec<f32>> = chosen
        .iter()
        .map(|&(e, _)| gather(h, &members[e], width))
        .collect();
    let gate_up: Vec<[&QuantMatrix; 2]> =
        chosen.iter().map(|(_, f)| [f.mats[0], f.mats[1]]).collect();
    let sets: Vec<(&[&QuantMatrix], &[f32])> = gate_up
        .iter()
        .zip(&xs)
        .map(|(m, x)| (&m[..], &x[..]))
        .collect();
    let mut acts = Vec::with_capacity(chosen.len());
    for (&(_, f), mut gu) in chosen.iter().zip(matmul_sets(&sets).map_err(err)?) {
        let mut up = gu.pop().unwrap_or_default();
        let mut gate = gu.pop().unwrap_or_default();
        add_bias(&mut gate, f.biases[0]);
        add_bias(&mut up, f.biases[1]);
        activate(pass.config.hidden_act, &mut gate, &up);
        acts.push(gate);
    }
    let downs: Vec<[&QuantMatrix; 1]> = chosen.iter().map(|(_, f)| [f.mats[2]]).collect();
    let sets: Vec<(&[&QuantMatrix], &[f32])> = downs
        .iter()
        .zip(&acts)
        .map(|(m, a)| (&m[..], &a[..]))
        .collect();
    let mut ys = vec![Vec::new(); mats.len()];
    for (&(e, f), mut y) in chosen.iter().zip(matmul_sets(&sets).map_err(err)?) {
        let mut y = y.pop().unwrap_or_default();
        add_bias(&mut y, f.biases[2]);
        ys[e] = y;
    }
    Ok(ys)
}

/// `y += b` on every row of `y` (`[n, b.len()]`), as [`crate::model::linear::Linear`] adds
/// its bias.
fn add_bias(y: &mut [f32], b: Option<&[f32]>) {
    if let Some(b) = b {
        for row in y.chunks_mut(b.len().max(1)) {
            crate::model::ops::add_assign(row, b);
        }
    }
}

fn err(e: anyhow::Error) -> candle_core::Error {
    candle_core::Error::Msg(format!("{e:#}"))
}
