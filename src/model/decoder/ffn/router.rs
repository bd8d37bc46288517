//! The token-choice router of a mixture of experts (Shazeer et al. 2017, "Outrageously Large
//! Neural Networks"; as Mixtral and Qwen3-MoE run it): a softmax over the router's logits,
//! the `k` most probable experts, their probabilities renormalized to sum to 1 when the
//! config asks (`norm_topk_prob`; always for gpt-oss, whose softmax over the `k` chosen
//! logits gives the same weights).

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
    let max = logits
        .iter()
        .copied()
        .filter(|v| !v.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<f32> = logits.iter().map(|&v| (v - max).exp()).collect();
    let sum: f32 = probs.iter().filter(|p| !p.is_nan()).sum();
    if sum > 0.0 {
        probs.iter_mut().for_each(|p| *p /= sum);
    }
    let mut order: Vec<usize> = (0..probs.len()).collect();
    // Descending probability, NaN last, ties to the lower index (a stable sort keeps it).
    order.sort_by(|&a, &b| {
        let (pa, pb) = (probs[a], probs[b]);
        match (pa.is_nan(), pb.is_nan()) {
            (false, false) => pb.total_cmp(&pa),
            (a_nan, b_nan) => a_nan.cmp(&b_nan),
        }
    });
    let mut experts: Vec<(usize, f32)> = order.into_iter().take(k).map(|e| (e, probs[e])).collect();
    if norm {
        let total: f32 = experts.iter().map(|&(_, w)| w).sum();
        if total > 0.0 {
            experts.iter_mut().for_each(|(_, w)| *w /= total);
        }
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
}
