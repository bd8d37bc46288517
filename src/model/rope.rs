//! RoPE frequencies: the inverse frequencies θ_i of rotary position embedding (Su et al.
//! 2021) and the context-extension variants that rescale them.
//!
//! Plain RoPE rotates dimension pair `i` of a head by `position · θ_i`, with
//! `θ_i = rope_theta^(−2i / head_dim)`, `i < head_dim / 2`. The variants change θ_i (and, for
//! YaRN, scale cos and sin by an attention factor):
//!
//! - **linear** (position interpolation, kaiokendev / Chen et al. 2023): `θ_i / factor`
//!   (transformers `modeling_rope_utils._compute_linear_scaling_rope_parameters`; llama.cpp's
//!   `freq_scale = 1 / factor`).
//! - **llama3** (Llama 3.1): wavelengths `λ_i = 2π / θ_i` shorter than
//!   `original_max_position_embeddings / high_freq_factor` keep θ_i, longer than
//!   `original_max_position_embeddings / low_freq_factor` become `θ_i / factor`, and those in
//!   between blend the two with `s = (original_max_position_embeddings / λ_i −
//!   low_freq_factor) / (high_freq_factor − low_freq_factor)`:
//!   `(1 − s) · θ_i / factor + s · θ_i` (transformers `_compute_llama3_parameters`).
//! - **yarn** (Peng et al. 2023, "YaRN"): the correction range `[low, high]` of dimensions
//!   between `beta_fast` and `beta_slow` rotations over `original_max_position_embeddings`
//!   (floored and ceiled when `truncate`, the default), a linear ramp over it, θ_i extrapolated
//!   (kept) below `low` and interpolated (`θ_i / factor`) above `high`; cos and sin are
//!   multiplied by `attention_factor`, by default `0.1 · ln(factor) + 1`, or
//!   `mscale(factor, mscale) / mscale(factor, mscale_all_dim)` when both are given
//!   (transformers `_compute_yarn_parameters`; llama.cpp `ggml_rope_yarn_corr_dims` and
//!   `rope_yarn`, which compute the same).
//! - **frequency factors** (GGUF `rope_freqs.weight`, which llama.cpp's converter writes for
//!   Llama 3.1/3.2 instead of the `llama3` parameters): `θ_i / freq_factors[i]` (ggml
//!   `ggml_rope_cache_init`: `theta / ff`).
//!
//! Everything here is computed in f64; the decoder rounds θ_i to f32 for its tables.
use std::f64::consts::PI;

/// How a model rescales its RoPE frequencies (HF `rope_scaling` / `rope_parameters`
/// `rope_type`, GGUF `{arch}.rope.scaling.type`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum RopeScaling {
    /// Plain RoPE (`rope_type` `default`, GGUF `none`).
    #[default]
    Default,
    /// Position interpolation: every θ_i divided by `factor`.
    Linear {
        /// `factor` (GGUF `rope.scaling.factor`).
        factor: f64,
    },
    /// Llama 3.1's frequency-dependent scaling.
    Llama3 {
        /// `factor` (8 for Llama 3.1, 32 for Llama 3.2).
        factor: f64,
        /// `low_freq_factor`.
        low_freq_factor: f64,
        /// `high_freq_factor`.
        high_freq_factor: f64,
        /// `original_max_position_embeddings`, tokens.
        original_max_position_embeddings: f64,
    },
    /// YaRN.
    Yarn(Yarn),
}

/// YaRN's parameters, named as in transformers' `rope_parameters`.
#[derive(Debug, Clone, PartialEq)]
pub struct Yarn {
    /// `factor`: context extension ratio.
    pub factor: f64,
    /// `original_max_position_embeddings` (GGUF `rope.scaling.original_context_length`).
    pub original_max_position_embeddings: f64,
    /// `beta_fast` (default 32).
    pub beta_fast: f64,
    /// `beta_slow` (default 1).
    pub beta_slow: f64,
    /// `attention_factor`, when given explicitly.
    pub attention_factor: Option<f64>,
    /// `mscale` (DeepSeek), when given.
    pub mscale: Option<f64>,
    /// `mscale_all_dim` (DeepSeek; GGUF `rope.scaling.yarn_log_multiplier`), when given.
    pub mscale_all_dim: Option<f64>,
    /// `truncate` (default true): floor/ceil the correction range.
    pub truncate: bool,
}

impl Yarn {
    /// YaRN with the paper's defaults: `beta_fast` 32, `beta_slow` 1, truncated range,
    /// default attention factor.
    pub fn new(factor: f64, original_max_position_embeddings: f64) -> Yarn {
        Yarn {
            factor,
            original_max_position_embeddings,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: None,
            mscale: None,
            mscale_all_dim: None,
            truncate: true,
        }
    }

    /// The factor cos and sin are multiplied by: `attention_factor` when given, else
    /// `m(factor, mscale) / m(factor, mscale_all_dim)` when both are given and non-zero, else
    /// `m(factor, 1)`, where `m(s, k) = 0.1 · k · ln(s) + 1` for `s > 1` and 1 otherwise.
    pub fn attention_factor(&self) -> f64 {
        let m = |scale: f64, k: f64| {
            if scale <= 1.0 {
                1.0
            } else {
                0.1 * k * scale.ln() + 1.0
            }
        };
        match (self.attention_factor, self.mscale, self.mscale_all_dim) {
            (Some(a), _, _) => a,
            (None, Some(ms), Some(all)) if ms != 0.0 && all != 0.0 => {
                m(self.factor, ms) / m(self.factor, all)
            }
            _ => m(self.factor, 1.0),
        }
    }

    /// The correction range `[low, high]` in dimension-pair indices: the dimension at which
    /// a frequency completes `rotations` turns over `original_max_position_embeddings`,
    /// `d · ln(L / (2π · rotations)) / (2 ln θ)`, for `beta_fast` (low) and `beta_slow`
    /// (high); floored/ceiled when `truncate`, clamped to `[0, d − 1]`.
    fn correction_range(&self, dim: usize, theta: f64) -> (f64, f64) {
        let d = dim as f64;
        let at = |rotations: f64| {
            d * (self.original_max_position_embeddings / (rotations * 2.0 * PI)).ln()
                / (2.0 * theta.ln())
        };
        let (mut low, mut high) = (at(self.beta_fast), at(self.beta_slow));
        if self.truncate {
            low = low.floor();
            high = high.ceil();
        }
        (low.max(0.0), high.min(d - 1.0))
    }
}

impl RopeScaling {
    /// The factor cos and sin are multiplied by: YaRN's attention factor, 1 otherwise.
    pub fn attention_factor(&self) -> f64 {
        match self {
            RopeScaling::Yarn(y) => y.attention_factor(),
            _ => 1.0,
        }
    }

    /// The variant's name as configs spell it (`default`, `linear`, `llama3`, `yarn`).
    pub fn name(&self) -> &'static str {
        match self {
            RopeScaling::Default => "default",
            RopeScaling::Linear { .. } => "linear",
            RopeScaling::Llama3 { .. } => "llama3",
            RopeScaling::Yarn(_) => "yarn",
        }
    }
}

/// The `head_dim / 2` inverse frequencies θ_i (radians per position) for a head of
/// `head_dim` values, base `theta` (`rope_theta`), rescaled by `scaling`, then divided by
/// `freq_factors[i]` when given (GGUF `rope_freqs.weight`; callers check its length is
/// `head_dim / 2`). See the module docs for each variant's formula and source.
pub fn inv_freq(
    head_dim: usize,
    theta: f64,
    scaling: &RopeScaling,
    freq_factors: Option<&[f32]>,
) -> Vec<f64> {
    let half = head_dim / 2;
    let d = head_dim as f64;
    let plain = (0..half).map(|i| 1.0 / theta.powf(2.0 * i as f64 / d));
    let scaled: Vec<f64> = match scaling {
        RopeScaling::Default => plain.collect(),
        RopeScaling::Linear { factor } => plain.map(|f| f / factor).collect(),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: old,
        } => {
            let low_freq_wavelen = old / low_freq_factor;
            let high_freq_wavelen = old / high_freq_factor;
            plain
                .map(|f| {
                    let wavelen = 2.0 * PI / f;
                    if wavelen < high_freq_wavelen {
                        f
                    } else if wavelen > low_freq_wavelen {
                        f / factor
                    } else {
                        let s = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - s) * f / factor + s * f
                    }
                })
                .collect()
        }
        RopeScaling::Yarn(y) => {
            let (low, mut high) = y.correction_range(head_dim, theta);
            if low == high {
                high += 0.001; // transformers' guard against a zero-width ramp
            }
            plain
                .enumerate()
                .map(|(i, f)| {
                    let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    // ramp 0: extrapolate (keep θ_i); ramp 1: interpolate (θ_i / factor).
                    let extrapolation = 1.0 - ramp;
                    (f / y.factor) * (1.0 - extrapolation) + f * extrapolation
                })
                .collect()
        }
    };
    match freq_factors {
        Some(ff) => scaled.iter().zip(ff).map(|(f, &k)| f / k as f64).collect(),
        None => scaled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3.2-1B's published config.json: head_dim 64 (2048 / 32), rope_theta 500000,
    /// rope_scaling {factor 32, low_freq_factor 1, high_freq_factor 4,
    /// original_max_position_embeddings 8192, rope_type llama3}. Expected values: issue 14
    /// (transformers' `_compute_llama3_parameters` on that config).
    #[test]
    fn llama_3_2_1b_inv_freq() {
        let scaling = RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        let f = inv_freq(64, 500_000.0, &scaling, None);
        let plain = inv_freq(64, 500_000.0, &RopeScaling::Default, None);
        assert_eq!(f.len(), 32);
        for (i, want) in [
            (14, 3.2114459948e-3),
            (15, 1.2905479282e-3),
            (18, 1.9461638185e-5),
            (31, 9.4183067254e-8),
        ] {
            let rel = (f[i] - want).abs() / want;
            assert!(rel <= 1e-6, "inv_freq[{i}] = {:e}, want {want:e}", f[i]);
        }
        assert_eq!(f[14], plain[14], "high frequencies are unchanged");
        assert_eq!(
            f[31],
            plain[31] / 32.0,
            "low frequencies are divided by factor"
        );
    }

    #[test]
    fn linear_divides_and_freq_factors_divide_per_dimension() {
        let plain = inv_freq(8, 10_000.0, &RopeScaling::Default, None);
        let lin = inv_freq(8, 10_000.0, &RopeScaling::Linear { factor: 4.0 }, None);
        let ff = inv_freq(
            8,
            10_000.0,
            &RopeScaling::Default,
            Some(&[1.0, 2.0, 4.0, 8.0]),
        );
        for i in 0..4 {
            assert_eq!(lin[i], plain[i] / 4.0);
            assert_eq!(ff[i], plain[i] / f64::from(1u32 << i));
        }
    }

    #[test]
    fn yarn_attention_factor() {
        let y = Yarn::new(4.0, 32768.0);
        assert!((y.attention_factor() - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-15);
        let y = Yarn {
            mscale: Some(0.707),
            mscale_all_dim: Some(0.707),
            ..Yarn::new(40.0, 4096.0)
        };
        assert_eq!(y.attention_factor(), 1.0);
        assert_eq!(Yarn::new(1.0, 4096.0).attention_factor(), 1.0);
    }
}
