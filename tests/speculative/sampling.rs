//! With sampling, the token at a drafted position follows the sampler's distribution
//! (temperature, then top-k, then top-p, as candle's `LogitsProcessor` applies them),
//! whether the draft is usually right or always wrong: over 10^4 seeds on a tiny random
//! K-quant Llama, the emitted tokens pass a chi-square test against an f64 reference of that
//! distribution computed from a plain forward pass.
use crate::common;
use nanollm::engine::spec::{SpecChoice, SpecMethod, Speculative, Synthetic};
use nanollm::engine::{CacheConfig, DecodeMode, Request, SamplingParams};
use nanollm::kv::KvCache;
use nanollm::model::Loaded;
use std::sync::atomic::AtomicBool;

/// Seeds per variant.
const SEEDS: u64 = 10_000;

/// The sampler's distribution for `logits` in f64: softmax at `t`, the `k` most likely kept,
/// then of those (most likely first) each kept while the mass before it is below `p`;
/// renormalized. (token, probability) pairs, most likely first.
pub(crate) fn reference(logits: &[f32], t: f64, k: usize, p: f64) -> Vec<(u32, f64)> {
    let max = logits.iter().fold(f64::MIN, |m, &v| m.max(v as f64));
    let w: Vec<f64> = logits
        .iter()
        .map(|&v| ((v as f64 - max) / t).exp())
        .collect();
    let z: f64 = w.iter().sum();
    let mut order: Vec<usize> = (0..w.len()).collect();
    order.sort_by(|&a, &b| w[b].total_cmp(&w[a]));
    order.truncate(k);
    let mut kept = Vec::new();
    let mut mass = 0.0;
    for i in order {
        if mass >= p {
            break;
        }
        mass += w[i] / z;
        kept.push((i as u32, w[i] / z));
    }
    let sum: f64 = kept.iter().map(|x| x.1).sum();
    kept.into_iter().map(|(i, q)| (i, q / sum)).collect()
}

/// Logits after `ids` from a plain forward pass (the decode kernels for the last row, as
/// the engine's first decode row of a prompt `ids[..prompt]`).
pub(crate) fn next_logits(m: &Loaded, ids: &[u32], prompt: usize) -> Vec<f32> {
    let c = m.decoder.config();
    let mut cache =
        KvCache::new(c.kv_shape(nanollm::kv::KvDtype::F16), 16, ids.len() + 1).expect("cache");
    m.decoder
        .forward_logits(&ids[..prompt], 0, prompt, &mut cache, prompt - 1)
        .expect("prefill");
    m.decoder
        .forward_logits(
            &ids[prompt..],
            prompt,
            prompt,
            &mut cache,
            ids.len() - prompt - 1,
        )
        .expect("decode")
}

/// Pearson's chi-square of `observed` counts against probabilities `expected` (bins with an
/// expected count below 5 merged into one); returns (statistic, degrees of freedom).
pub(crate) fn chi_square(observed: &[u64], expected: &[f64], n: u64) -> (f64, usize) {
    let (mut stat, mut bins) = (0.0, 0usize);
    let (mut small_o, mut small_e) = (0.0, 0.0);
    for (&o, &q) in observed.iter().zip(expected) {
        let e = q * n as f64;
        if e < 5.0 {
            small_o += o as f64;
            small_e += e;
        } else {
            stat += (o as f64 - e).powi(2) / e;
            bins += 1;
        }
    }
    if small_e > 0.0 {
        stat += (small_o - small_e).powi(2) / small_e;
        bins += 1;
    }
    (stat, bins.saturating_sub(1))
}

/// Chi-square's 99.9% quantile for 1 ..= 10 degrees of freedom.
pub(crate) const CHI2_999: [f64; 10] = [
    10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59,
];

#[test]
fn a_drafted_token_follows_the_samplers_distribution_over_10k_seeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tiny-k.gguf");
    common::tiny::write_tiny_k_quant_llama(&path, false);
    let m = nanollm::model::source::load(&path, &candle_core::Device::Cpu, false).expect("load");
    let prompt: Vec<u32> = vec![1, 504, 2212, 314, 253, 1345, 28, 339];
    let (t, k, p) = (1.3, 8, 0.9);
    let sampling = |seed| SamplingParams {
        temperature: t,
        top_k: Some(k),
        top_p: Some(p),
        seed,
        repeat_penalty: 1.0,
        repeat_last_n: 64,
    };
    // The first token is sampled from the prompt's logits; the runs whose first token is
    // the most likely one, `a`, have a known distribution at the drafted position after it.
    let first = reference(&next_logits_prompt(&m, &prompt), t, k, p);
    let a = first[0].0;
    let mut ids = prompt.clone();
    ids.push(a);
    let want = reference(&next_logits(&m, &ids, prompt.len()), t, k, p);
    assert!(want.len() >= 3, "a degenerate distribution: {want:?}");
    let vocab = m.decoder.config().vocab_size as u32;
    let outside = (0..vocab)
        .find(|v| want.iter().all(|w| w.0 != *v))
        .expect("a token");
    // The draft at the position after `a`: the most likely token (right about want[0].1 of
    // the time), or a token outside the distribution's support (always wrong).
    for (label, draft) in [("usually right", want[0].0), ("always wrong", outside)] {
        let synthetic: &'static Synthetic = Box::leak(Box::new(
            Synthetic::new(vec![a, draft, draft], vec![1.0], 0, vocab).expect("synthetic"),
        ));
        let spec = Speculative {
            method: SpecMethod::Synthetic(synthetic),
            k: 1,
            force: true,
        };
        let mut counts = vec![0u64; want.len()];
        let (mut n, mut drafted, mut accepted) = (0u64, 0u64, 0u64);
        for seed in 0..SEEDS {
            let r = Request {
                prompt_ids: prompt.clone(),
                max_new_tokens: 3,
                sampling: sampling(seed),
                mode: DecodeMode::KvCache,
                cache: CacheConfig::default(),
                stop_token_ids: Vec::new(),
                stop_strings: Vec::new(),
                ignore_eos: true,
                speculative: SpecChoice::On(spec),
            };
            let stop = AtomicBool::new(false);
            let g = nanollm::engine::generate(&m.decoder, &m.tokenizer, &r, &stop, |_| Ok(()))
                .expect("generate");
            let report = g.stats.spec.expect("report");
            drafted += report.counts.num_draft_tokens;
            accepted += report.counts.num_accepted_tokens;
            if g.tokens[0] != a {
                continue;
            }
            n += 1;
            let bin = want.iter().position(|w| w.0 == g.tokens[1]);
            let bin =
                bin.unwrap_or_else(|| panic!("{label}: token {} outside the support", g.tokens[1]));
            counts[bin] += 1;
        }
        let q: Vec<f64> = want.iter().map(|w| w.1).collect();
        let (stat, df) = chi_square(&counts, &q, n);
        let bound = CHI2_999[df.clamp(1, 10) - 1];
        eprintln!(
            "{label}: {n} runs with the first token {a}; chi-square {stat:.2} on {df} df (99.9% bound {bound}); observed {counts:?}, expected {:?}; {accepted} of {drafted} drafts accepted",
            q.iter().map(|x| (x * n as f64).round()).collect::<Vec<_>>()
        );
        assert!(n >= 1000, "{label}: only {n} runs had the first token {a}");
        assert!(df >= 2, "{label}: {df} degrees of freedom");
        assert!(
            stat < bound,
            "{label}: chi-square {stat:.2} ≥ {bound} on {df} df"
        );
        // Both outcomes happened: right drafts kept, wrong ones rejected.
        if label == "always wrong" {
            assert_eq!(accepted, 0);
        } else {
            assert!(
                accepted > 0 && accepted < drafted,
                "{accepted} of {drafted}"
            );
        }
    }
}

/// The prompt's own next-token logits (the prefill's last row).
pub(crate) fn next_logits_prompt(m: &Loaded, prompt: &[u32]) -> Vec<f32> {
    let c = m.decoder.config();
    let mut cache =
        KvCache::new(c.kv_shape(nanollm::kv::KvDtype::F16), 16, prompt.len()).expect("cache");
    m.decoder
        .forward_logits(prompt, 0, prompt.len(), &mut cache, prompt.len() - 1)
        .expect("prefill")
}
