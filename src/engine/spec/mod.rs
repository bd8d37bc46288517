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
pub mod acceptance;
pub mod cost;
pub mod draft;
pub mod ngram;
pub mod report;
pub mod shape;
pub mod stats;
pub mod synthetic;

pub use acceptance::Acceptance;
pub use cost::VerifyCost;
pub use report::SpecReport;
pub use shape::{BatchShape, StepShape};
pub use stats::SpecStats;
pub use synthetic::Synthetic;

/// Most draft tokens per step (`--spec-tokens`): a verify step of 1 + 16 rows is still a
/// decode-sized step on a CPU; beyond it a wrong draft wastes more than it can save.
pub const MAX_SPEC_TOKENS: usize = 16;

/// A draft model's sequence stops probing after this many probes that did not bring
/// drafting back: each probe first runs the draft over every token it missed, a cost that
/// grows with the wait, so a draft that does not pay must stop being caught up.
pub const MAX_DRAFT_PROBES: u32 = 2;

/// Longest suffix prompt lookup matches (`--spec-ngram-max`, `prompt_lookup_max`): each
/// size tried costs a scan of the sequence per step.
pub const MAX_NGRAM: usize = 64;

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
    /// A draft model (`--draft-model`, loaded once by the command) proposes each token
    /// ([`draft`]); the callers run it, [`Speculative::propose`] has nothing to offer.
    Draft,
    /// Benchmarks only: drafts from the request's known greedy continuation, each right with
    /// a set probability per position (llama.cpp's `--spec-synth-rates`), to measure
    /// tokens/s against acceptance on this machine. `'static` so the settings stay plain
    /// `Copy` data, as the engine's configuration is: the sweep leaks each small one.
    Synthetic(&'static Synthetic),
}

impl std::fmt::Display for SpecMethod {
    /// `ngram (2..4)`: the method and its settings, as the reports print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecMethod::Ngram { min, max } => write!(f, "ngram ({min}..{max})"),
            SpecMethod::Synthetic(s) => write!(f, "synthetic ({})", s.rates_label()),
            SpecMethod::Draft => f.write_str("draft model"),
        }
    }
}

/// Speculative decoding's settings for a request (or an engine's default for its requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Speculative {
    /// Where drafts come from (serialized as its [`Display`](std::fmt::Display) text).
    #[serde(serialize_with = "method_text")]
    pub method: SpecMethod,
    /// Most draft tokens per verify step, 1 ..= [`MAX_SPEC_TOKENS`] (`--spec-tokens`).
    pub k: usize,
    /// Always draft `k` tokens when the method has them (`--spec-force`); off: each step
    /// drafts the number the sequence's acceptance and the measured verify cost say pays
    /// ([`Acceptance::choose`]), none when no number does.
    pub force: bool,
}

/// `method` as its text (`ngram (1..3)`), for reports.
fn method_text<S: serde::Serializer>(m: &SpecMethod, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(m)
}

/// Whether a request speculates: as the engine's default (`--spec` of run-batch, serve,
/// bench), not at all, or with its own settings (serve's per-request `speculative` field,
/// `generate --spec`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SpecChoice {
    /// The engine's `speculative` setting.
    #[default]
    Engine,
    /// Plain decoding for this request.
    Off,
    /// These settings for this request.
    On(Speculative),
}

impl SpecChoice {
    /// The settings this request decodes with, under the engine's default `engine`.
    pub fn resolve(&self, engine: Option<&Speculative>) -> Option<Speculative> {
        match self {
            SpecChoice::Engine => engine.copied(),
            SpecChoice::Off => None,
            SpecChoice::On(s) => Some(*s),
        }
    }
}

impl Speculative {
    /// Prompt lookup with `k` drafts, matching suffixes of `min ..= max` tokens.
    ///
    /// Errors: `k` of 0 or above [`MAX_SPEC_TOKENS`], `min` of 0, `max` below `min` or above
    /// [`MAX_NGRAM`].
    pub fn ngram(k: usize, min: usize, max: usize) -> anyhow::Result<Speculative> {
        if k == 0 || k > MAX_SPEC_TOKENS {
            anyhow::bail!("--spec-tokens {k}: must be 1 to {MAX_SPEC_TOKENS}");
        }
        if min == 0 || max < min {
            anyhow::bail!(
                "--spec-ngram-min {min} --spec-ngram-max {max}: the shortest match must be at least 1 and at most the longest"
            );
        }
        if max > MAX_NGRAM {
            anyhow::bail!("--spec-ngram-max {max}: at most {MAX_NGRAM} tokens");
        }
        Ok(Speculative {
            method: SpecMethod::Ngram { min, max },
            k,
            force: false,
        })
    }

    /// A draft model with `k` drafts.
    ///
    /// Errors: `k` of 0 or above [`MAX_SPEC_TOKENS`].
    pub fn draft(k: usize) -> anyhow::Result<Speculative> {
        if k == 0 || k > MAX_SPEC_TOKENS {
            anyhow::bail!("--spec-tokens {k}: must be 1 to {MAX_SPEC_TOKENS}");
        }
        Ok(Speculative {
            method: SpecMethod::Draft,
            k,
            force: false,
        })
    }

    /// How many of `available` drafts a sequence verifies this step, in a batch whose
    /// drafts so far are `batch` (updated with this choice): all when forced, else what the
    /// turn-down rule chooses from `acceptance` and `cost` (0: none pays), a draft model
    /// having `catch_up` tokens to run before its first draft.
    pub fn how_many(
        &self,
        acceptance: &mut Acceptance,
        available: usize,
        batch: &mut BatchShape,
        cost: &VerifyCost,
        catch_up: usize,
    ) -> usize {
        if self.uses_draft_model() {
            acceptance.cap_probes(MAX_DRAFT_PROBES);
        }
        let last = acceptance.last_choice();
        let n = if self.force || available == 0 {
            available
        } else {
            acceptance.choose(available, batch.without(last), cost, catch_up)
        };
        acceptance.set_choice(n);
        batch.update(last, acceptance.last_choice());
        n
    }

    /// Note that a sequence does not draft this step (it is not decoding), in `batch` too.
    pub fn skip(acceptance: &mut Acceptance, batch: &mut BatchShape) {
        let last = acceptance.last_choice();
        acceptance.set_choice(0);
        batch.update(last, acceptance.last_choice());
    }

    /// True when a draft model proposes the drafts.
    pub fn uses_draft_model(&self) -> bool {
        self.method == SpecMethod::Draft
    }

    /// Drafts for a sequence whose tokens are `tokens` (the first `num_prompt` its prompt),
    /// at most `limit` of them (the step's budget and the request's remaining length
    /// already applied).
    pub fn propose(&self, tokens: &[u32], num_prompt: usize, limit: usize) -> Vec<u32> {
        let k = self.k.min(limit);
        if k == 0 {
            return Vec::new();
        }
        match &self.method {
            SpecMethod::Ngram { min, max } => ngram::propose(tokens, *min, *max, k),
            SpecMethod::Synthetic(s) => s.propose(tokens.len().saturating_sub(num_prompt), k),
            SpecMethod::Draft => Vec::new(),
        }
    }
}
