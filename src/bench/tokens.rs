//! The identical-tokens check: greedy decoding is deterministic, so every compared mode must
//! generate the same tokens for the same prompt. If they do not, the modes did different
//! work and their speedups compare nothing.
use crate::bench::plan::BenchMode;
use crate::bench::run::RunSample;
use serde::Serialize;

/// The tokens one run generated, and which run it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenRun<'a> {
    /// Decode mode.
    pub mode: BenchMode,
    /// Prompt length (tokens).
    pub prompt_len: usize,
    /// 1-based run index.
    pub run: usize,
    /// Generated token ids.
    pub tokens: &'a [u32],
}

impl<'a> From<&'a RunSample> for TokenRun<'a> {
    fn from(s: &'a RunSample) -> TokenRun<'a> {
        TokenRun {
            mode: s.mode,
            prompt_len: s.prompt_len,
            run: s.run,
            tokens: &s.tokens,
        }
    }
}

/// A run whose tokens differ from the reference run's for the same prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// Prompt length (tokens).
    pub prompt_len: usize,
    /// The mode of the differing run.
    pub mode: BenchMode,
    /// The differing run (1-based).
    pub run: usize,
    /// The mode of the reference run.
    pub reference_mode: BenchMode,
    /// The reference run (1-based).
    pub reference_run: usize,
    /// Index of the first generated token that differs.
    pub first_difference: usize,
    /// The reference run's token there (None when it generated fewer tokens).
    pub reference_token: Option<u32>,
    /// The differing run's token there (None when it generated fewer tokens).
    pub token: Option<u32>,
}

/// Outcome of the check for one prompt length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromptTokens {
    /// Prompt length (tokens).
    pub prompt_len: usize,
    /// Modes that ran this prompt.
    pub modes: Vec<BenchMode>,
    /// Runs compared (all modes together).
    pub runs: usize,
    /// True when every run generated the reference run's tokens.
    pub identical: bool,
}

/// Outcome of the identical-tokens check over a whole benchmark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenCheck {
    /// True when, for every prompt, every run of every mode generated the same tokens.
    pub identical: bool,
    /// The mode whose first run is the reference for each prompt.
    pub reference_mode: BenchMode,
    /// Per prompt length.
    pub prompts: Vec<PromptTokens>,
    /// Every run that differs from its prompt's reference run.
    pub mismatches: Vec<Mismatch>,
}

impl TokenCheck {
    /// (prompt length, mode) pairs with at least one differing run, without repeats.
    pub fn differing(&self) -> Vec<(usize, BenchMode)> {
        let mut out: Vec<(usize, BenchMode)> = Vec::new();
        for m in &self.mismatches {
            if !out.contains(&(m.prompt_len, m.mode)) {
                out.push((m.prompt_len, m.mode));
            }
        }
        out
    }

    /// One line for the report, e.g. `identical tokens: yes (naive, kv-cache; prompts 128, 512; 12 runs)`.
    pub fn describe(&self) -> String {
        let lens: Vec<String> = self
            .prompts
            .iter()
            .map(|p| p.prompt_len.to_string())
            .collect();
        let mut modes: Vec<&str> = Vec::new();
        for p in &self.prompts {
            for m in &p.modes {
                if !modes.contains(&m.name()) {
                    modes.push(m.name());
                }
            }
        }
        let runs: usize = self.prompts.iter().map(|p| p.runs).sum();
        if self.identical {
            return format!(
                "identical tokens: yes ({} generated the same tokens for every prompt; prompts {}; {})",
                modes.join(", "),
                lens.join(", "),
                crate::units::count_of(runs, "run")
            );
        }
        let which: Vec<String> = self
            .mismatches
            .iter()
            .map(|m| {
                format!(
                    "{} run {} vs {} run {} at prompt {}: first differs at generated token {} ({} vs {})",
                    m.mode.name(),
                    m.run,
                    m.reference_mode.name(),
                    m.reference_run,
                    m.prompt_len,
                    m.first_difference,
                    m.token.map_or("none".into(), |t| t.to_string()),
                    m.reference_token.map_or("none".into(), |t| t.to_string()),
                )
            })
            .collect();
        format!("identical tokens: NO — {}", which.join("; "))
    }
}

/// Compare every run with the reference run of its prompt length: the first run of
/// `reference` there, or the first run listed when `reference` did not run that prompt.
/// Pure: no model, no timing; prompt lengths are reported in the order first seen.
pub fn check_identical_tokens(runs: &[TokenRun], reference: BenchMode) -> TokenCheck {
    let mut lens: Vec<usize> = Vec::new();
    for r in runs {
        if !lens.contains(&r.prompt_len) {
            lens.push(r.prompt_len);
        }
    }
    let mut prompts = Vec::new();
    let mut mismatches = Vec::new();
    for len in lens {
        let group: Vec<&TokenRun> = runs.iter().filter(|r| r.prompt_len == len).collect();
        let Some(reference_run) = group
            .iter()
            .find(|r| r.mode == reference)
            .or(group.first())
            .copied()
        else {
            continue;
        };
        let mut modes: Vec<BenchMode> = Vec::new();
        let before = mismatches.len();
        for r in &group {
            if !modes.contains(&r.mode) {
                modes.push(r.mode);
            }
            if let Some(first_difference) = first_difference(reference_run.tokens, r.tokens) {
                mismatches.push(Mismatch {
                    prompt_len: len,
                    mode: r.mode,
                    run: r.run,
                    reference_mode: reference_run.mode,
                    reference_run: reference_run.run,
                    first_difference,
                    reference_token: reference_run.tokens.get(first_difference).copied(),
                    token: r.tokens.get(first_difference).copied(),
                });
            }
        }
        prompts.push(PromptTokens {
            prompt_len: len,
            modes,
            runs: group.len(),
            identical: mismatches.len() == before,
        });
    }
    TokenCheck {
        identical: mismatches.is_empty(),
        reference_mode: reference,
        prompts,
        mismatches,
    }
}

/// Index of the first differing token, or of the end of the shorter list when one is a
/// proper prefix of the other; None when equal.
fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BenchMode::{KvCache, Naive};

    fn run(mode: BenchMode, prompt_len: usize, run: usize, tokens: &[u32]) -> TokenRun<'_> {
        TokenRun {
            mode,
            prompt_len,
            run,
            tokens,
        }
    }

    #[test]
    fn equal_runs_pass() {
        let runs = [
            run(Naive, 8, 1, &[1, 2, 3]),
            run(KvCache, 8, 1, &[1, 2, 3]),
            run(KvCache, 16, 1, &[4]),
            run(Naive, 16, 1, &[4]),
        ];
        let c = check_identical_tokens(&runs, Naive);
        assert!(c.identical);
        assert!(c.mismatches.is_empty() && c.differing().is_empty());
        assert_eq!(c.prompts.len(), 2);
        assert!(
            c.describe().starts_with("identical tokens: yes"),
            "{}",
            c.describe()
        );
    }

    #[test]
    fn a_differing_mode_is_reported_against_the_naive_reference() {
        let runs = [
            run(KvCache, 8, 1, &[1, 2, 3]),
            run(Naive, 8, 1, &[1, 2, 3]),
            run(Naive, 16, 1, &[5, 6, 7]),
            run(KvCache, 16, 1, &[5, 9, 7]),
        ];
        let c = check_identical_tokens(&runs, Naive);
        assert!(!c.identical);
        assert_eq!(c.differing(), vec![(16, KvCache)]);
        let m = &c.mismatches[0];
        assert_eq!(
            (
                m.reference_mode,
                m.first_difference,
                m.reference_token,
                m.token
            ),
            (Naive, 1, Some(6), Some(9))
        );
        assert!(c.prompts[0].identical && !c.prompts[1].identical);
        assert!(c.describe().contains("NO"), "{}", c.describe());
    }

    #[test]
    fn a_shorter_run_and_run_to_run_drift_are_mismatches() {
        let runs = [run(Naive, 8, 1, &[1, 2, 3]), run(Naive, 8, 2, &[1, 2])];
        let c = check_identical_tokens(&runs, Naive);
        assert_eq!(c.mismatches[0].first_difference, 2);
        assert_eq!(c.mismatches[0].token, None);
        assert_eq!(c.differing(), vec![(8, Naive)]);
    }
}
