//! `--seed` (generate): llama.cpp's grammar (`-1` draws one, a negative seed is taken
//! modulo 2^64, as run-batch and serve take a JSON seed) and the seed a run samples with.
use crate::engine::SamplingParams;

/// `--seed`'s value: `-1` (draw one) or a fixed seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedArg {
    /// `-1`: draw a seed at random, as without `--seed`.
    Drawn,
    /// This seed (a negative one taken modulo 2^64).
    Fixed(u64),
}

/// Parse `--seed`: an integer from -2^63 to 2^64 − 1. Errors: anything else, named.
pub(crate) fn parse_seed(s: &str) -> Result<SeedArg, String> {
    match s.trim().parse::<i128>() {
        Ok(-1) => Ok(SeedArg::Drawn),
        Ok(v) if (i64::MIN as i128..0).contains(&v) => Ok(SeedArg::Fixed(v as i64 as u64)),
        Ok(v) if (0..=u64::MAX as i128).contains(&v) => Ok(SeedArg::Fixed(v as u64)),
        _ => Err("expected an integer from -2^63 to 2^64 − 1 (-1 draws a seed)".into()),
    }
}

/// The sampling seed: `--seed` when given; else, when sampling (temperature > 0), one drawn
/// at random (reported by `--show-stats` and `--json`, as llama.cpp does); else (greedy,
/// where it has no effect) a fixed one.
pub fn resolve_seed(seed: Option<u64>, temperature: f64) -> u64 {
    match seed {
        Some(s) => s,
        None if temperature > 0.0 => crate::cli::batch_input::random_seed(),
        None => SamplingParams::greedy().seed,
    }
}
