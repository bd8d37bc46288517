//! The sampler's distribution as numbers, and rejection sampling of a sampled draft
//! (Leviathan et al., "Fast Inference from Transformers via Speculative Decoding", ICML 2023,
//! §2.3): a draft `x` drawn from the draft model's `q` is kept with probability
//! `min(1, p(x) / q(x))`; on rejection the token is drawn from `max(0, p − q)`, renormalized.
//! The token emitted then follows the target's `p` exactly, whatever `q` is.
use super::argmax::argmax;
use super::params::{means_argmax, SamplingParams};

/// A small seeded generator for drafts and their accept/reject draws (splitmix64: one
/// multiply-xorshift per draw, enough for sampling; not for anything secret).
#[derive(Debug, Clone)]
pub struct DraftRng(u64);

impl DraftRng {
    /// A generator for a request seeded `seed` (its own stream, apart from the sampler's).
    pub fn new(seed: u64) -> DraftRng {
        DraftRng(seed ^ 0x5bd1_e995_d1b5_4a32)
    }

    /// A uniform draw in [0, 1) with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A token drawn from `weights` (≥ 0, not necessarily normalized); the last token with
    /// weight when rounding leaves the draw past the end. None when every weight is 0.
    pub fn pick(&mut self, weights: impl Iterator<Item = f64> + Clone) -> Option<u32> {
        let total: f64 = weights.clone().sum();
        if total.is_nan() || total <= 0.0 {
            return None;
        }
        let mut left = self.unit() * total;
        let mut last = None;
        for (i, w) in weights.enumerate() {
            if w > 0.0 {
                last = Some(i as u32);
                if left < w {
                    return last;
                }
                left -= w;
            }
        }
        last
    }
}

/// The distribution the sampler draws from for `logits` (`[vocab_size]`) after `context`'s
/// repeat penalty, temperature, top-k then top-p, as candle's `LogitsProcessor` applies
/// them: probabilities summing to 1 (f64 arithmetic, stored f32). A greedy pick is one-hot
/// at the argmax. NaN logits give an all-zero vector (nothing to draw from).
pub fn distribution(logits: &[f32], params: &SamplingParams, context: &[u32]) -> Vec<f32> {
    let mut l = logits.to_vec();
    if params.repeat_penalty != 1.0 {
        let start = context.len().saturating_sub(params.repeat_last_n);
        let mut seen = std::collections::HashSet::new();
        for &t in &context[start..] {
            if seen.insert(t) {
                if let Some(v) = l.get_mut(t as usize) {
                    *v = if *v >= 0.0 {
                        *v / params.repeat_penalty
                    } else {
                        *v * params.repeat_penalty
                    };
                }
            }
        }
    }
    let mut out = vec![0f32; l.len()];
    if l.iter().any(|v| v.is_nan()) {
        return out;
    }
    if means_argmax(params) {
        if let Some(i) = argmax(&l) {
            out[i as usize] = 1.0;
        }
        return out;
    }
    let t = params.temperature;
    let max = l.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let mut p: Vec<f64> = l.iter().map(|&v| ((v as f64 - max) / t).exp()).collect();
    let sum: f64 = p.iter().sum();
    p.iter_mut().for_each(|v| *v /= sum);
    let mut keep = params.top_k.unwrap_or(p.len()).min(p.len());
    let top_p = params.top_p.filter(|&v| v < 1.0);
    if keep == p.len() && top_p.is_none() {
        // Plain softmax: no ranking needed (a sort of a 262k vocabulary is ~20 ms).
        for (o, v) in out.iter_mut().zip(&p) {
            *o = *v as f32;
        }
        return out;
    }
    // Most likely first (ties by id), as candle's sorts order them.
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
    if let Some(top_p) = top_p {
        // Zero each token once the ones before it reach top_p (the one crossing it stays).
        let mut cumsum = 0.0;
        for (n, &i) in order.iter().take(keep).enumerate() {
            if cumsum >= top_p {
                keep = n;
                break;
            }
            cumsum += p[i];
        }
    }
    let kept: f64 = order.iter().take(keep).map(|&i| p[i]).sum();
    for &i in order.iter().take(keep) {
        out[i] = (p[i] / kept) as f32;
    }
    out
}

/// Rejection sampling of the draft `draft`, drawn from `q`, against the target's `p` (both
/// from [`distribution`]): `draft` itself when kept, else a token from `max(0, p − q)`.
pub fn judge(p: &[f32], q: &[f32], draft: u32, rng: &mut DraftRng) -> u32 {
    let d = draft as usize;
    let (pd, qd) = (
        p.get(d).copied().unwrap_or(0.0) as f64,
        q.get(d).copied().unwrap_or(0.0) as f64,
    );
    if qd > 0.0 && rng.unit() < (pd / qd).min(1.0) {
        return draft;
    }
    let residual = p
        .iter()
        .zip(q)
        .map(|(&a, &b)| (a as f64 - b as f64).max(0.0));
    rng.pick(residual)
        .or_else(|| rng.pick(p.iter().map(|&v| v as f64)))
        .unwrap_or(draft)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(t: f64, k: Option<usize>, p: Option<f64>) -> SamplingParams {
        SamplingParams {
            temperature: t,
            top_k: k,
            top_p: p,
            ..SamplingParams::greedy()
        }
    }

    #[test]
    fn the_distribution_is_softmax_then_top_k_then_top_p() {
        let logits = [2.0f32, 1.0, 0.0, -1.0];
        let e: Vec<f64> = logits.iter().map(|&v| (v as f64).exp()).collect();
        let z: f64 = e.iter().sum();
        let all = distribution(&logits, &params(1.0, None, None), &[]);
        for (a, b) in all.iter().zip(&e) {
            assert!((*a as f64 - b / z).abs() < 1e-6);
        }
        let top2 = distribution(&logits, &params(1.0, Some(2), None), &[]);
        assert!((top2[0] as f64 - e[0] / (e[0] + e[1])).abs() < 1e-6);
        assert_eq!(&top2[2..], &[0.0, 0.0]);
        // p[0] ≈ 0.64 < 0.7: the second token crosses 0.7 and stays, the rest go.
        let nucleus = distribution(&logits, &params(1.0, None, Some(0.7)), &[]);
        assert!(nucleus[1] > 0.0 && nucleus[2] == 0.0);
        let greedy = distribution(&logits, &SamplingParams::greedy(), &[]);
        assert_eq!(greedy, vec![1.0, 0.0, 0.0, 0.0]);
        let penalised = SamplingParams {
            repeat_penalty: 100.0,
            ..SamplingParams::greedy()
        };
        assert_eq!(distribution(&logits, &penalised, &[0])[1], 1.0);
    }

    /// The emitted token follows `p` whatever `q` is: frequencies over many draws, drafts
    /// drawn from `q`, within 4 standard errors of `p`.
    #[test]
    fn judged_drafts_follow_the_target() {
        let p = [0.5f32, 0.3, 0.2, 0.0];
        let q = [0.1f32, 0.1, 0.4, 0.4];
        let mut rng = DraftRng::new(7);
        let n = 200_000;
        let mut counts = [0usize; 4];
        for _ in 0..n {
            let x = rng.pick(q.iter().map(|&v| v as f64)).expect("draw");
            counts[judge(&p, &q, x, &mut rng) as usize] += 1;
        }
        for (c, &pi) in counts.iter().zip(&p) {
            let f = *c as f64 / n as f64;
            let se = (pi as f64 * (1.0 - pi as f64) / n as f64).sqrt().max(1e-9);
            assert!((f - pi as f64).abs() <= 4.0 * se, "{counts:?}");
        }
    }
}
