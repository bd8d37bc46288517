//! [`SamplingParams`]: how a request samples (names as in llama.cpp / vLLM), and when that
//! means a plain argmax.
use anyhow::{bail, Result};

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
pub fn means_argmax(params: &SamplingParams) -> bool {
    params.is_greedy() || params.temperature < 1e-6 || params.top_p.is_some_and(|p| p < 1e-6)
}
