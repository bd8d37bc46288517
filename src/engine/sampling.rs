//! Sampling glue over candle-transformers' `LogitsProcessor` and repeat-penalty helper.
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
                "--temperature {}: must be a number ≥ 0 (0 = greedy)",
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
                "--repeat-penalty {}: must be a number > 0 (1.0 = off)",
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

/// Picks the next token from a step's logits.
pub struct Sampler {
    processor: LogitsProcessor,
    params: SamplingParams,
}

impl Sampler {
    /// A sampler for `params` (validated by the caller).
    pub fn new(params: &SamplingParams) -> Sampler {
        let t = params.temperature;
        // candle samples in f32: a temperature below ~1e-6 overflows the scaled logits and a
        // top-p below f32's range keeps no token, so both mean "take the most likely token".
        let sampling = if params.is_greedy() || t < 1e-6 || params.top_p.is_some_and(|p| p < 1e-6) {
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

    /// Sample from `logits` (`[vocab_size]`), penalising tokens in the last `repeat_last_n`
    /// of `context`. Errors: tensor failures.
    pub fn sample(&mut self, logits: &Tensor, context: &[u32]) -> Result<u32> {
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
