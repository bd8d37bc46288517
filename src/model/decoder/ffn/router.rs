//! The token-choice router of a mixture of experts (Shazeer et al. 2017, "Outrageously Large
//! Neural Networks"; as Mixtral and Qwen3-MoE run it): a softmax over the router's logits,
//! the `k` most probable experts, their probabilities renormalized to sum to 1 when the
//! config asks (`norm_topk_prob`; always for gpt-oss, whose softmax over the `k` chosen
//! logits gives the same weights); DeepSeek's sigmoid scores, selection bias, expert groups
//! and scaling in [`route_with`].
use crate::model::config::MoeScoring;

/// One row's route: the chosen experts, most probable first, with their weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// `(expert, weight)`, `k` of them, by descending probability (ties: lower index first).
    pub experts: Vec<(usize, f32)>,
}

/// Route one row from its router logits (`[num_experts]`): softmax in f32 (max subtracted,
/// the exponentials summed in expert order), the `k` largest probabilities, divided by their
/// sum (in route order) when `norm`. A fixed sequence of operations on the row alone, so a
/// row's route does not depend on the rows beside it (design rule R1).
///
/// A logit that is NaN sorts below every number (it is never chosen over one); `k` is at
/// most the number of experts (checked at load, `MoeConfig::validate`).
pub fn route(logits: &[f32], k: usize, norm: bool) -> Route {
    route_with(logits, &Router::plain(k, norm))
}

/// A router's settings beyond top-k ([`MoeConfig`](crate::model::config::MoeConfig)'s
/// scoring, groups and scaling) and the selection bias of the layer, if any.
#[derive(Debug, Clone, Copy)]
pub struct Router<'a> {
    /// Experts per row.
    pub k: usize,
    /// Divide the chosen weights by their sum.
    pub norm: bool,
    /// Softmax over the experts or a sigmoid per expert.
    pub scoring: MoeScoring,
    /// Multiply the chosen weights by this (after `norm`); 1: skipped.
    pub scale: f32,
    /// Expert groups and groups kept (1, 1: no grouping).
    pub groups: (usize, usize),
    /// Added to the scores for choosing only (DeepSeek-V3 `e_score_correction_bias`,
    /// `[num_experts]`).
    pub bias: Option<&'a [f32]>,
}

impl Router<'_> {
    /// Softmax, top-`k`, renormalized when `norm`: Mixtral's and Qwen3-MoE's router.
    pub fn plain(k: usize, norm: bool) -> Router<'static> {
        Router {
            k,
            norm,
            scoring: MoeScoring::Softmax,
            scale: 1.0,
            groups: (1, 1),
            bias: None,
        }
    }
}

/// Descending `v`, NaN last, ties to the lower index.
fn descending(v: &[f32]) -> impl Fn(&usize, &usize) -> std::cmp::Ordering + '_ {
    move |&a, &b| {
        let (pa, pb) = (v[a], v[b]);
        match (pa.is_nan(), pb.is_nan()) {
            (false, false) => pb.total_cmp(&pa),
            (a_nan, b_nan) => a_nan.cmp(&b_nan),
        }
    }
}

/// [`route`] with `r`'s scoring, groups, selection bias and scaling (HF
/// `DeepseekV2MoEGate` / `DeepseekV3TopkRouter`): scores = softmax or sigmoid of the
/// logits; the choice ranks `scores + bias`; with groups, only the experts of the
/// `groups.1` best groups compete (a group's rank: its best score under softmax, HF V2's
/// `group_limited_greedy`; the sum of its two best under sigmoid, V3's); the weights are
/// the unbiased scores of the chosen experts, divided by their sum when `norm`, times
/// `scale`. Every step runs on the row alone in a fixed order (design rule R1).
pub fn route_with(logits: &[f32], r: &Router) -> Route {
    let probs: Vec<f32> = match r.scoring {
        MoeScoring::Softmax => {
            let max = logits
                .iter()
                .copied()
                .filter(|v| !v.is_nan())
                .fold(f32::NEG_INFINITY, f32::max);
            let mut p: Vec<f32> = logits.iter().map(|&v| (v - max).exp()).collect();
            let sum: f32 = p.iter().filter(|p| !p.is_nan()).sum();
            if sum > 0.0 {
                p.iter_mut().for_each(|p| *p /= sum);
            }
            p
        }
        MoeScoring::Sigmoid => logits.iter().map(|&v| 1.0 / (1.0 + (-v).exp())).collect(),
    };
    let mut choose: Vec<f32> = match r.bias {
        Some(b) => probs.iter().zip(b).map(|(p, b)| p + b).collect(),
        None => probs.clone(),
    };
    let (n_group, keep) = r.groups;
    let e = choose.len();
    if n_group > 1 && e.is_multiple_of(n_group) && keep < n_group {
        let per = e / n_group;
        let rank: Vec<f32> = choose
            .chunks_exact(per)
            .map(|g| {
                let mut idx: Vec<usize> = (0..per).collect();
                idx.sort_by(descending(g));
                match r.scoring {
                    MoeScoring::Softmax => g[idx[0]],
                    MoeScoring::Sigmoid => idx.iter().take(2).map(|&i| g[i]).sum(),
                }
            })
            .collect();
        let mut order: Vec<usize> = (0..n_group).collect();
        order.sort_by(descending(&rank));
        for &dropped in &order[keep..] {
            choose[dropped * per..(dropped + 1) * per].fill(f32::NEG_INFINITY);
        }
    }
    let mut order: Vec<usize> = (0..e).collect();
    // Descending score, NaN last, ties to the lower index (a stable sort keeps it).
    order.sort_by(descending(&choose));
    let mut experts: Vec<(usize, f32)> =
        order.into_iter().take(r.k).map(|e| (e, probs[e])).collect();
    if r.norm {
        let total: f32 = experts.iter().map(|&(_, w)| w).sum();
        if total > 0.0 {
            experts.iter_mut().for_each(|(_, w)| *w /= total);
        }
    }
    if r.scale != 1.0 {
        experts.iter_mut().for_each(|(_, w)| *w *= r.scale);
    }
    Route { experts }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_of_the_softmax_renormalized() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let r = route(&logits, 2, false);
        let e: Vec<usize> = r.experts.iter().map(|x| x.0).collect();
        // 3.0 twice: the lower index first.
        assert_eq!(e, [1, 3]);
        let z: f64 = logits.iter().map(|&v| (v as f64).exp()).sum();
        let p3 = 3f64.exp() / z;
        assert!((r.experts[0].1 as f64 - p3).abs() < 1e-6);
        let n = route(&logits, 3, true);
        assert_eq!(n.experts.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 3, 2]);
        let s: f32 = n.experts.iter().map(|x| x.1).sum();
        assert!((s - 1.0).abs() < 1e-6, "{s}");
        let want2 = 2f64.exp() / (2.0 * 3f64.exp() + 2f64.exp());
        assert!((n.experts[2].1 as f64 - want2).abs() < 1e-6);
    }

    #[test]
    fn nan_logits_are_never_chosen_over_numbers() {
        let r = route(&[f32::NAN, 0.5, -1.0], 2, true);
        assert_eq!(r.experts.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn groups_bias_and_scale_follow_deepseek_v3() {
        // 4 experts in 2 groups; sigmoid scores; the bias moves expert 3 ahead of expert 1
        // for choosing, but its weight stays its own score.
        let logits = [2.0f32, 1.0, -1.0, 0.5];
        let bias = [0.0f32, 0.0, 0.0, 1.0];
        let r = Router {
            k: 2,
            norm: true,
            scoring: MoeScoring::Sigmoid,
            scale: 2.5,
            groups: (2, 1),
            bias: Some(&bias),
        };
        let got = route_with(&logits, &r);
        let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
        // Group 0 ranks sig(2) + sig(1) = 1.61; group 1: sig(0.5) + 1 + sig(-1) = 1.89.
        assert_eq!(got.experts.iter().map(|x| x.0).collect::<Vec<_>>(), [3, 2]);
        let (w3, w2) = (sig(0.5), sig(-1.0));
        assert!((got.experts[0].1 - 2.5 * w3 / (w3 + w2)).abs() < 1e-6);
        // Without the bias, group 0 wins and experts 0, 1 are chosen.
        let plain = route_with(&logits, &Router { bias: None, ..r });
        assert_eq!(
            plain.experts.iter().map(|x| x.0).collect::<Vec<_>>(),
            [0, 1]
        );
    }
}
