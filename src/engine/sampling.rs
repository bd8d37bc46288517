//! Sampling glue over candle-transformers' `LogitsProcessor` and repeat-penalty helper, and
//! our own argmax for the plain greedy pick (candle's, bit for bit, without a tensor).
use anyhow::{bail, Result};
use candle_core::Tensor;
use candle_transformers::generation::{LogitsProcessor, Sampling};

/// Sampling settings (names as in llama.cpp / vLLM).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy (argmax).
    pub temperature: f64,
    /// Keep only the k most likely tokens (None = all).
    pub top_k: Option<usize>,
    /// Nucleus sampling: keep the smallest set with probability ≥ p (None = 1.0).
    pub top_p: Option<f64>,
    /// RNG seed.
    pub seed: u64,
    /// Divide positive logits (multiply negative ones) of recent tokens by this; 1.0 = off.
    pub repeat_penalty: f32,
    /// How many recent tokens the repeat penalty looks at.
    pub repeat_last_n: usize,
}

impl SamplingParams {
    /// Greedy decoding, no penalty.
    pub fn greedy() -> SamplingParams {
        SamplingParams {
            temperature: 0.0,
            top_k: None,
            top_p: None,
            seed: 299792458,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
        }
    }

    /// Check ranges. Errors: one line naming the flag and its valid range.
    pub fn validate(&self) -> Result<()> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            bail!(
                "--temperature {}: must be a finite number ≥ 0 (0 = greedy)",
                self.temperature
            );
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                bail!("--top-p {p}: must be in (0, 1]");
            }
        }
        if self.top_k == Some(0) {
            bail!("--top-k 0: must be ≥ 1");
        }
        if !self.repeat_penalty.is_finite() || self.repeat_penalty <= 0.0 {
            bail!(
                "--repeat-penalty {}: must be a finite number > 0 (1.0 = off)",
                self.repeat_penalty
            );
        }
        Ok(())
    }

    /// True when decoding is deterministic argmax.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

/// True when `params` pick the most likely token: greedy, or (candle samples in f32) a
/// temperature below ~1e-6, which overflows the scaled logits, or a top-p below f32's range,
/// which keeps no token.
fn means_argmax(params: &SamplingParams) -> bool {
    params.is_greedy() || params.temperature < 1e-6 || params.top_p.is_some_and(|p| p < 1e-6)
}

/// Picks the next token from a step's logits.
pub struct Sampler {
    processor: LogitsProcessor,
    params: SamplingParams,
}

impl Sampler {
    /// A sampler for `params` (validated by the caller).
    pub fn new(params: &SamplingParams) -> Sampler {
        let t = params.temperature;
        let sampling = if means_argmax(params) {
            Sampling::ArgMax
        } else {
            match (params.top_k, params.top_p.filter(|&p| p < 1.0)) {
                (None, None) => Sampling::All { temperature: t },
                (Some(k), None) => Sampling::TopK { k, temperature: t },
                (None, Some(p)) => Sampling::TopP { p, temperature: t },
                (Some(k), Some(p)) => Sampling::TopKThenTopP {
                    k,
                    p,
                    temperature: t,
                },
            }
        };
        Sampler {
            processor: LogitsProcessor::from_sampling(params.seed, sampling),
            params: params.clone(),
        }
    }

    /// True when the pick is a plain argmax: greedy (or a temperature/top-p that means it,
    /// see [`Sampler::new`]) with no repeat penalty.
    fn plain_argmax(&self) -> bool {
        self.params.repeat_penalty == 1.0 && means_argmax(&self.params)
    }

    /// [`Sampler::sample`] over a step's logits as a slice (`[vocab_size]`): a plain argmax
    /// runs on the slice ([`argmax`]: the same token as candle's, without building a
    /// tensor, ~50 µs per sequence per step); any other pick goes through candle.
    /// Errors: empty logits, a NaN or +∞ logit when sampling (no distribution to draw
    /// from: the forward pass overflowed), tensor failures.
    pub fn sample_vec(&mut self, logits: Vec<f32>, context: &[u32]) -> Result<u32> {
        if self.plain_argmax() {
            return argmax(&logits).ok_or_else(|| anyhow::anyhow!("no logits to sample from"));
        }
        if let Some(i) = logits
            .iter()
            .position(|v| v.is_nan() || *v == f32::INFINITY)
        {
            bail!(
                "cannot sample: logit {i} is {} (the forward pass overflowed)",
                logits[i]
            );
        }
        let n = logits.len();
        let t = Tensor::from_vec(logits, n, &candle_core::Device::Cpu)?;
        self.sample(&t, context)
    }

    /// Sample from `logits` (`[vocab_size]`), penalising tokens in the last `repeat_last_n`
    /// of `context`. Errors: tensor failures.
    pub fn sample(&mut self, logits: &Tensor, context: &[u32]) -> Result<u32> {
        if self.plain_argmax() {
            // A contiguous f32 CPU tensor (the decoder's logits) is read in place; any other
            // is converted first.
            let (storage, layout) = logits.storage_and_layout();
            let picked = match (&*storage, layout.contiguous_offsets()) {
                (candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)), Some((a, b))) => {
                    argmax(&v[a..b])
                }
                _ => {
                    drop(storage);
                    let v = logits
                        .to_dtype(candle_core::DType::F32)?
                        .flatten_all()?
                        .to_vec1::<f32>()?;
                    argmax(&v)
                }
            };
            return picked.ok_or_else(|| anyhow::anyhow!("no logits to sample from"));
        }
        let logits = if self.params.repeat_penalty == 1.0 {
            logits.clone()
        } else {
            let start = context.len().saturating_sub(self.params.repeat_last_n);
            candle_transformers::utils::apply_repeat_penalty(
                logits,
                self.params.repeat_penalty,
                &context[start..],
            )?
        };
        Ok(self.processor.sample(&logits)?)
    }
}

/// The index of the largest value, the first of equal ones; NaN values are never chosen
/// (index 0 when `logits[0]` is NaN): exactly what candle's CPU `argmax` returns (its loop
/// keeps index 0 and moves only to a strictly larger value), computed in two vectorizable
/// passes (the maximum, then its first position). None for an empty slice.
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let first = *logits.first()?;
    if first.is_nan() {
        return Some(0);
    }
    // Lane-wise maximum; `c > m` is false for NaN, so NaN never enters.
    let mut lanes = [first; 16];
    let mut chunks = logits.chunks_exact(16);
    for c in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            if v > *m {
                *m = v;
            }
        }
    }
    let mut max = first;
    for &v in lanes.iter().chain(chunks.remainder()) {
        if v > max {
            max = v;
        }
    }
    // The first value equal to the maximum (±0 compare equal, as in candle's `<`).
    let at = logits.iter().position(|&v| v == max)?;
    u32::try_from(at).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// candle's own argmax over the same values: the oracle.
    fn candle_argmax(v: &[f32]) -> u32 {
        let t = Tensor::from_vec(v.to_vec(), v.len(), &candle_core::Device::Cpu).expect("tensor");
        t.argmax(candle_core::D::Minus1)
            .and_then(|i| i.to_scalar::<u32>())
            .expect("argmax")
    }

    #[test]
    fn argmax_is_candles_on_ties_nan_infinities_and_signed_zeros() {
        let cases: Vec<Vec<f32>> = vec![
            vec![1.0],
            vec![f32::NAN],
            vec![f32::NAN, 5.0, 7.0],
            vec![1.0, f32::NAN, 7.0, f32::NAN],
            vec![3.0, 3.0, 3.0],
            vec![-0.0, 0.0, -0.0],
            vec![0.0, -0.0],
            vec![f32::NEG_INFINITY; 40],
            vec![f32::NEG_INFINITY, f32::INFINITY, f32::INFINITY],
            (0..100).map(|i| (i % 7) as f32).collect(),
            (0..33).map(|i| if i == 32 { 9.0 } else { 1.0 }).collect(),
            (0..33)
                .map(|i| if i == 17 || i == 31 { 9.0 } else { f32::NAN })
                .collect(),
        ];
        for v in cases {
            assert_eq!(argmax(&v), Some(candle_argmax(&v)), "{v:?}");
        }
        assert_eq!(argmax(&[]), None);
    }

    proptest! {
        // Values from a small set, so ties, NaN and infinities are common.
        #[test]
        fn argmax_equals_candles(v in prop::collection::vec(
            prop::sample::select(vec![
                -2.0f32, -0.0, 0.0, 1.5, 3.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY,
            ]),
            1..80,
        )) {
            prop_assert_eq!(argmax(&v), Some(candle_argmax(&v)));
        }

        #[test]
        fn argmax_equals_candles_on_logit_like_values(v in prop::collection::vec(-30.0f32..30.0, 1..3000)) {
            prop_assert_eq!(argmax(&v), Some(candle_argmax(&v)));
        }
    }

    #[test]
    fn a_plain_argmax_sampler_takes_the_slice_path_and_agrees_with_candle() {
        let v: Vec<f32> = (0..49_152)
            .map(|i| ((i * 7919) % 10_007) as f32 / 100.0)
            .collect();
        let mut greedy = Sampler::new(&SamplingParams::greedy());
        let via_candle = candle_argmax(&v);
        assert_eq!(
            greedy.sample_vec(v.clone(), &[]).expect("sample"),
            via_candle
        );
        let t = Tensor::from_vec(v.clone(), v.len(), &candle_core::Device::Cpu).expect("tensor");
        assert_eq!(greedy.sample(&t, &[]).expect("sample"), via_candle);
        // A view into a larger storage is read at its offset (the +inf before it is not
        // its); another dtype is converted first: the same pick.
        let wide = Tensor::from_vec(
            [vec![f32::INFINITY; 3], v.clone()].concat(),
            v.len() + 3,
            &candle_core::Device::Cpu,
        )
        .and_then(|w| w.narrow(0, 3, v.len()))
        .expect("view");
        assert_eq!(greedy.sample(&wide, &[]).expect("sample"), via_candle);
        let f64s = t.to_dtype(candle_core::DType::F64).expect("f64");
        assert_eq!(greedy.sample(&f64s, &[]).expect("sample"), via_candle);
        // A repeat penalty is not a plain argmax: it goes through candle, and can move the pick.
        let penalised = SamplingParams {
            repeat_penalty: 1e6,
            ..SamplingParams::greedy()
        };
        let mut s = Sampler::new(&penalised);
        assert!(!s.plain_argmax());
        let picked = s.sample_vec(v.clone(), &[via_candle]).expect("sample");
        assert_ne!(picked, via_candle);
        assert!(greedy.sample_vec(Vec::new(), &[]).is_err());
    }
}
