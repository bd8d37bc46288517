//! The mixture-of-experts feed-forward block (Mixtral, Qwen3-MoE, DeepSeek): a router picks
//! `k` experts per row ([`super::router::route_with`]), each a gated MLP ([`DenseFfn`]); the
//! row's output is `Σ w_j · expert_j(x)` over its route, plus the shared experts' output
//! where the model has them (DeepSeekMoE, Dai et al. 2024, arXiv:2401.06066).
//!
//! A multi-row step (a batch, a prompt) groups rows by expert, so each chosen expert's
//! weights are read once per step for all its rows (ggml's `mul_mat_id` idea). A row's bits
//! never depend on which rows share its step (design rule R1): each expert's kernels compute
//! a row alone, and the row's sum runs in its route's order.
use crate::model::config::MoeScoring;
use crate::model::decoder::ffn::dense::DenseFfn;
use crate::model::decoder::ffn::router::{route_with, Route, Router};
use crate::model::decoder::pass::LayerPass;
use crate::model::linear::Linear;
use candle_core::Result;
use std::sync::Arc;

pub mod counters;
mod grouped;

pub use counters::{ExpertCounters, ExpertCounts};

/// A mixture-of-experts block's weights and routing settings.
#[derive(Debug, Clone)]
pub struct MoeFfn {
    /// The router: `[num_experts, hidden_size]` (HF `mlp.gate`, GGUF `ffn_gate_inp`).
    pub router: Linear,
    /// The experts, each `gate`/`up` `[moe_intermediate_size, hidden_size]` and `down`
    /// `[hidden_size, moe_intermediate_size]` (GGUF `ffn_{gate,up,down}_exps`, one slice of
    /// each per expert).
    pub experts: Vec<DenseFfn>,
    /// Experts per row (`num_experts_per_tok`).
    pub top_k: usize,
    /// Renormalize the chosen weights to sum to 1 (`norm_topk_prob`).
    pub norm_topk_prob: bool,
    /// What the router did (passes, rows, experts touched, the histogram); shared by clones.
    pub counters: Arc<ExpertCounters>,
    /// The shared experts, one gated MLP every row runs (DeepSeek `mlp.shared_experts`, GGUF
    /// `ffn_{gate,up,down}_shexp`); its output is added to the routed sum.
    pub shared: Option<DenseFfn>,
    /// How logits become scores (softmax, or DeepSeek-V3's sigmoid).
    pub scoring: MoeScoring,
    /// The routed weights' factor (`routed_scaling_factor`).
    pub scale: f32,
    /// Expert groups and groups kept per row (`n_group`, `topk_group`).
    pub groups: (usize, usize),
    /// Added to the scores for choosing experts only (`e_score_correction_bias`, GGUF
    /// `exp_probs_b`), `[num_experts]`.
    pub selection_bias: Option<Vec<f32>>,
}

impl MoeFfn {
    /// The block from its router (`[E, hidden_size]`), its `E` experts and its routing
    /// settings (`num_experts_per_tok`, `norm_topk_prob`), its counters at zero.
    pub fn new(
        router: Linear,
        experts: Vec<DenseFfn>,
        top_k: usize,
        norm_topk_prob: bool,
    ) -> MoeFfn {
        let counters = Arc::new(ExpertCounters::new(experts.len()));
        MoeFfn {
            router,
            experts,
            top_k,
            norm_topk_prob,
            counters,
            shared: None,
            scoring: MoeScoring::Softmax,
            scale: 1.0,
            groups: (1, 1),
            selection_bias: None,
        }
    }

    /// This block with DeepSeek's router settings from `m` (scoring, scaling, groups), its
    /// selection bias and shared experts.
    pub fn with_deepseek(
        self,
        m: &crate::model::config::MoeConfig,
        shared: Option<DenseFfn>,
        selection_bias: Option<Vec<f32>>,
    ) -> MoeFfn {
        MoeFfn {
            shared,
            scoring: m.scoring,
            scale: m.routed_scaling_factor,
            groups: (m.n_group, m.topk_group),
            selection_bias,
            ..self
        }
    }

    /// The routes of the normed rows `h` (`[Σ n, hidden_size]`): one per row.
    pub fn routes(&self, pass: &LayerPass, h: &[f32]) -> Result<Vec<Route>> {
        let logits = self.router.forward_mask(h, pass.dense)?;
        let e = self.experts.len();
        if e == 0 || logits.len() != pass.dense.len() * e {
            candle_core::bail!(
                "router output of {} values is not rows of {e}",
                logits.len()
            );
        }
        let router = Router {
            k: self.top_k,
            norm: self.norm_topk_prob,
            scoring: self.scoring,
            scale: self.scale,
            groups: self.groups,
            bias: self.selection_bias.as_deref(),
        };
        Ok(logits
            .chunks_exact(e)
            .map(|l| route_with(l, &router))
            .collect())
    }

    /// `h`: `[Σ n, hidden_size]` → `[Σ n, hidden_size]`. Rows are grouped by expert: an
    /// expert runs once on the rows routed to it (each row on its own kernel class,
    /// `pass.dense`), then each row sums its experts' outputs in its route's order.
    pub fn forward(&self, pass: &LayerPass, h: &[f32]) -> Result<Vec<f32>> {
        let n = pass.dense.len();
        if n == 0 || !h.len().is_multiple_of(n) {
            candle_core::bail!("feed-forward input of {} values is not {n} rows", h.len());
        }
        let width = h.len() / n;
        let routes = self.routes(pass, h)?;
        // Per expert, the (row, place in the row's route) pairs routed to it, rows ascending.
        let mut members: Vec<Vec<(usize, usize)>> = vec![Vec::new(); self.experts.len()];
        for (row, r) in routes.iter().enumerate() {
            for (slot, &(e, _)) in r.experts.iter().enumerate() {
                members[e].push((row, slot));
            }
        }
        self.counters.record(n, members.iter().map(Vec::len));
        let k = self.top_k;
        let ys = match grouped::quantized_experts(&self.experts, &members) {
            Some(mats) => grouped::run(pass, &mats, &members, h, width)?,
            None => self.each_expert(pass, &members, h, width)?,
        };
        // Each row's expert outputs, `[n, k, width]`.
        let mut outs = vec![0f32; n * k * width];
        for (m, y) in members.iter().zip(&ys) {
            for (&(row, slot), y) in m.iter().zip(y.chunks_exact(width)) {
                let at = (row * k + slot) * width;
                outs[at..at + width].copy_from_slice(y);
            }
        }
        let mut out = vec![0f32; n * width];
        for (row, r) in routes.iter().enumerate() {
            let o = &mut out[row * width..(row + 1) * width];
            for (slot, &(_, w)) in r.experts.iter().enumerate() {
                let at = (row * k + slot) * width;
                let y = &outs[at..at + width];
                if slot == 0 {
                    o.iter_mut().zip(y).for_each(|(o, y)| *o = w * y);
                } else {
                    o.iter_mut().zip(y).for_each(|(o, y)| *o += w * y);
                }
            }
        }
        if let Some(shared) = &self.shared {
            let y = shared.forward(pass, h)?;
            crate::model::ops::add_assign(&mut out, &y);
        }
        Ok(out)
    }

    /// Each expert on its member rows (`members[e]`), one expert after another through
    /// [`DenseFfn::forward`] (experts with a prefill copy or candle's weights: HF folders):
    /// per expert, `[members, width]` (empty for an expert no row chose).
    fn each_expert(
        &self,
        pass: &LayerPass,
        members: &[Vec<(usize, usize)>],
        h: &[f32],
        width: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let mut ys = Vec::with_capacity(members.len());
        for (expert, m) in self.experts.iter().zip(members) {
            if m.is_empty() {
                ys.push(Vec::new());
                continue;
            }
            let xs = grouped::gather(h, m, width);
            let dense: Vec<bool> = m.iter().map(|&(row, _)| pass.dense[row]).collect();
            let sub = LayerPass {
                dense: &dense,
                ..*pass
            };
            ys.push(expert.forward(&sub, &xs)?);
        }
        Ok(ys)
    }

    /// The block's matrices: the router, then each expert's gate, up, down, then the shared
    /// experts'.
    pub fn matrices(&self) -> Vec<&Linear> {
        let mut all = vec![&self.router];
        all.extend(self.experts.iter().flat_map(|e| e.matrices()));
        all.extend(self.shared.iter().flat_map(|e| e.matrices()));
        all
    }
}

#[cfg(test)]
mod tests;
