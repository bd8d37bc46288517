//! Speculative decoding: drafts proposed for a decoding sequence, verified by the target in
//! one multi-row step, the longest agreeing prefix kept and the rejected rows' K/V rolled
//! back (Leviathan et al., "Fast Inference from Transformers via Speculative Decoding",
//! ICML 2023; prompt lookup as vLLM's `ngram` method and llama.cpp's `ngram-simple`).
//!
//! The verify step's rows are generated rows: they run on the decode kernels (design rule
//! R1), so row `i`'s logits are bit for bit those a one-token step at that position would
//! give. The engine samples each row's token with the request's own sampler, in order, and
//! keeps going while the sample equals the draft. For a deterministic draft (prompt lookup)
//! that is exact rejection sampling — the draft `d` is kept with probability `p(d)`, and
//! on rejection the token comes from `p` without `d`, renormalized — and it draws the same
//! random numbers as plain decoding, so speculative == plain, bit for bit, greedy or seeded.
pub mod ngram;
pub mod stats;

pub use stats::SpecStats;

/// Most draft tokens per step (`--spec-tokens`): a verify step of 1 + 16 rows is still a
/// decode-sized step on a CPU; beyond it a wrong draft wastes more than it can save.
pub const MAX_SPEC_TOKENS: usize = 16;

/// How drafts are proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecMethod {
    /// Prompt lookup: the last `n` tokens (`max` down to `min`) matched earlier in the
    /// sequence (prompt and generated tokens), and the tokens that followed the most recent
    /// match proposed (vLLM's `prompt_lookup_min` / `prompt_lookup_max`).
    Ngram {
        /// Shortest suffix matched, ≥ 1.
        min: usize,
        /// Longest suffix matched, ≥ `min`.
        max: usize,
    },
}

impl std::fmt::Display for SpecMethod {
    /// `ngram (2..4)`: the method and its settings, as the reports print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecMethod::Ngram { min, max } => write!(f, "ngram ({min}..{max})"),
        }
    }
}

/// Speculative decoding's settings for an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Speculative {
    /// Where drafts come from.
    pub method: SpecMethod,
    /// Most draft tokens per verify step, 1 ..= [`MAX_SPEC_TOKENS`] (`--spec-tokens`).
    pub k: usize,
}

impl Speculative {
    /// Prompt lookup with `k` drafts, matching suffixes of `min ..= max` tokens.
    ///
    /// Errors: `k` of 0 or above [`MAX_SPEC_TOKENS`], `min` of 0, `max` below `min`.
    pub fn ngram(k: usize, min: usize, max: usize) -> anyhow::Result<Speculative> {
        if k == 0 || k > MAX_SPEC_TOKENS {
            anyhow::bail!("--spec-tokens {k}: must be 1 to {MAX_SPEC_TOKENS}");
        }
        if min == 0 || max < min {
            anyhow::bail!(
                "--spec-ngram-min {min} --spec-ngram-max {max}: the shortest match must be at least 1 and at most the longest"
            );
        }
        Ok(Speculative {
            method: SpecMethod::Ngram { min, max },
            k,
        })
    }

    /// Drafts for a sequence whose tokens are `tokens`, at most `limit` of them (the step's
    /// budget and the request's remaining length already applied).
    pub fn propose(&self, tokens: &[u32], limit: usize) -> Vec<u32> {
        let k = self.k.min(limit);
        if k == 0 {
            return Vec::new();
        }
        match self.method {
            SpecMethod::Ngram { min, max } => ngram::propose(tokens, min, max, k),
        }
    }
}
