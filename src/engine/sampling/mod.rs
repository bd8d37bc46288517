//! Sampling glue over candle-transformers' `LogitsProcessor` and repeat-penalty helper, and
//! our own argmax for the plain greedy pick (candle's, bit for bit, without a tensor).
use anyhow::{bail, Result};
use candle_core::Tensor;
use candle_transformers::generation::{LogitsProcessor, Sampling};

mod argmax;
mod params;
pub mod rejection;

pub use argmax::argmax;
pub use params::{means_argmax, SamplingParams};

/// Errors when `logits` hold a NaN or +∞: no distribution to draw from (the forward pass
/// overflowed).
fn check_drawable(logits: &[f32]) -> Result<()> {
    if let Some(i) = logits
        .iter()
        .position(|v| v.is_nan() || *v == f32::INFINITY)
    {
        bail!(
            "cannot sample: logit {i} is {} (the forward pass overflowed)",
            logits[i]
        );
    }
    Ok(())
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

    /// The settings this sampler draws with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// [`Sampler::sample_vec`] over a borrowed row: a plain argmax reads it in place, any
    /// other pick copies it first.
    pub fn sample_slice(&mut self, logits: &[f32], context: &[u32]) -> Result<u32> {
        if self.plain_argmax() {
            return argmax(logits).ok_or_else(|| anyhow::anyhow!("no logits to sample from"));
        }
        self.sample_vec(logits.to_vec(), context)
    }

    /// The token for a row whose input was drafted from the draft model's distribution `q`
    /// (`draft` drawn from it): rejection sampling against this sampler's distribution of
    /// `logits` ([`rejection::judge`]), its draws from `rng`. Errors: a NaN or +∞ logit.
    pub fn judge_draft(
        &mut self,
        logits: &[f32],
        draft: u32,
        q: &[f32],
        context: &[u32],
        rng: &mut rejection::DraftRng,
    ) -> Result<u32> {
        check_drawable(logits)?;
        let p = rejection::distribution(logits, &self.params, context);
        Ok(rejection::judge(&p, q, draft, rng))
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
        check_drawable(&logits)?;
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
