//! `--spec`, `--spec-tokens`, `--spec-ngram-min/max`, `--spec-force`, `--draft-model`: speculative decoding
//! (generate, run-batch, serve, bench), off by default.
use crate::engine::spec::draft::check_compatible;
use crate::engine::spec::Speculative;
use crate::model::source::Loaded;
use anyhow::{bail, Context, Result};

/// `--spec`'s methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SpecMethodArg {
    /// Prompt lookup: drafts copied from where the sequence's last tokens occurred before
    /// (vLLM's `ngram`, llama.cpp's `ngram-simple`); pays when the output copies the input.
    Ngram,
    /// A draft model (`--draft-model FILE`, the same vocabulary): each draft is its next
    /// token; pays when it is much cheaper than the model and agrees with it often.
    Draft,
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
    /// The draft model for `--spec draft`: a GGUF file with the model's vocabulary (a
    /// smaller model of its family, or a lower-bit quantization of the same weights)
    #[arg(long, value_name = "FILE")]
    pub draft_model: Option<std::path::PathBuf>,
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
            ("--draft-model", self.draft_model.is_some()),
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
            if let Some(d) = &self.draft_model {
                bail!(
                    "--draft-model {}: speculative decoding is off; add --spec draft",
                    d.display()
                );
            }
            return Ok(None);
        };
        match method {
            SpecMethodArg::Ngram => {
                let k = self.spec_tokens.unwrap_or(DEFAULT_SPEC_TOKENS);
                let min = self.spec_ngram_min.unwrap_or(1);
                let max = self.spec_ngram_max.unwrap_or(3.max(min));
                if let Some(d) = &self.draft_model {
                    bail!(
                        "--draft-model {}: only --spec draft uses a draft model, not --spec ngram",
                        d.display()
                    );
                }
                let mut spec = Speculative::ngram(k, min, max)?;
                spec.force = self.spec_force;
                Ok(Some(spec))
            }
            SpecMethodArg::Draft => {
                for (flag, v) in [
                    ("--spec-ngram-min", self.spec_ngram_min),
                    ("--spec-ngram-max", self.spec_ngram_max),
                ] {
                    if let Some(v) = v {
                        bail!("{flag} {v}: prompt lookup's setting; --spec draft does not use it");
                    }
                }
                if self.draft_model.is_none() {
                    bail!("--spec draft needs a draft model: add --draft-model FILE");
                }
                let k = self.spec_tokens.unwrap_or(DEFAULT_SPEC_TOKENS);
                let mut spec = Speculative::draft(k)?;
                spec.force = self.spec_force;
                Ok(Some(spec))
            }
        }
    }

    /// Load `--draft-model` (when `--spec draft` asks for it) and check it against the
    /// model `target` (same vocabulary, token for token).
    ///
    /// Errors: the file does not load; a different vocabulary (one line naming the flag).
    pub fn load_draft(&self, target: &Loaded) -> Result<Option<Loaded>> {
        let Some(path) = self
            .draft_model
            .as_ref()
            .filter(|_| self.spec == Some(SpecMethodArg::Draft))
        else {
            return Ok(None);
        };
        if path.is_dir() {
            bail!(
                "--draft-model {}: a directory; expected a GGUF file",
                path.display()
            );
        }
        if !path.is_file() {
            bail!("--draft-model {}: no such file", path.display());
        }
        let draft = crate::model::source::load(path, &candle_core::Device::Cpu, false)
            .with_context(|| format!("--draft-model {}", path.display()))?;
        check_compatible(
            (&target.decoder, &target.tokenizer),
            (&draft.decoder, &draft.tokenizer),
            &path.display().to_string(),
        )?;
        Ok(Some(draft))
    }
}
