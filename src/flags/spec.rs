//! `--spec`, `--spec-tokens`, `--spec-ngram-min/max`, `--spec-force`: speculative decoding
//! (generate, run-batch, serve, bench), off by default.
use crate::engine::spec::Speculative;
use anyhow::{bail, Result};

/// `--spec`'s methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SpecMethodArg {
    /// Prompt lookup: drafts copied from where the sequence's last tokens occurred before
    /// (vLLM's `ngram`, llama.cpp's `ngram-simple`); pays when the output copies the input.
    Ngram,
}

/// Speculative decoding's flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SpecArgs {
    /// Speculative decoding: `ngram` drafts tokens by prompt lookup and verifies them in one
    /// step, keeping the longest agreeing prefix; the output is plain decoding's, token for
    /// token [default: off]
    #[arg(long, value_enum, value_name = "METHOD")]
    pub spec: Option<SpecMethodArg>,
    /// Draft tokens per verify step, 1 to 16 [default: 4]
    #[arg(long, value_name = "K")]
    pub spec_tokens: Option<usize>,
    /// Prompt lookup's shortest suffix matched (vLLM's prompt_lookup_min) [default: 1]
    #[arg(long, value_name = "N")]
    pub spec_ngram_min: Option<usize>,
    /// Prompt lookup's longest suffix matched (vLLM's prompt_lookup_max) [default: 3]
    #[arg(long, value_name = "N")]
    pub spec_ngram_max: Option<usize>,
    /// Verify every draft the method proposes, even where the sequence's acceptance says it
    /// does not pay (by default each step drafts the number that pays at the measured
    /// verify cost, none when no number does)
    #[arg(long)]
    pub spec_force: bool,
}

/// `--spec-tokens`'s default: four drafts cost little more than one row on a CPU.
pub const DEFAULT_SPEC_TOKENS: usize = 4;

impl SpecArgs {
    /// The `--spec*` flags given, by name (for "has no effect" warnings).
    pub fn given(&self) -> Vec<&'static str> {
        [
            ("--spec", self.spec.is_some()),
            ("--spec-tokens", self.spec_tokens.is_some()),
            ("--spec-ngram-min", self.spec_ngram_min.is_some()),
            ("--spec-ngram-max", self.spec_ngram_max.is_some()),
            ("--spec-force", self.spec_force),
        ]
        .into_iter()
        .filter_map(|(flag, on)| on.then_some(flag))
        .collect()
    }

    /// The engine's setting. Errors: a value out of range, or a `--spec-*` flag without
    /// `--spec`.
    pub fn speculative(&self) -> Result<Option<Speculative>> {
        let Some(method) = self.spec else {
            for (flag, v) in [
                ("--spec-tokens", self.spec_tokens),
                ("--spec-ngram-min", self.spec_ngram_min),
                ("--spec-ngram-max", self.spec_ngram_max),
            ] {
                if let Some(v) = v {
                    bail!("{flag} {v}: speculative decoding is off; add --spec ngram");
                }
            }
            if self.spec_force {
                bail!("--spec-force: speculative decoding is off; add --spec ngram");
            }
            return Ok(None);
        };
        match method {
            SpecMethodArg::Ngram => {
                let k = self.spec_tokens.unwrap_or(DEFAULT_SPEC_TOKENS);
                let min = self.spec_ngram_min.unwrap_or(1);
                let max = self.spec_ngram_max.unwrap_or(3.max(min));
                let mut spec = Speculative::ngram(k, min, max)?;
                spec.force = self.spec_force;
                Ok(Some(spec))
            }
        }
    }
}
