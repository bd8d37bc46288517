//! [`Synthetic`]: drafts with a chosen acceptance rate per position, for benchmarks (as
//! llama.cpp's `--spec-synth-rates`): the request's greedy continuation is known from a
//! plain run, so a draft is made right (the continuation's token) or wrong (another token)
//! at will, and tokens/s can be charted against acceptance and k on this machine.
use anyhow::{bail, Result};

/// Drafts from a known greedy continuation, each right with its position's rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Synthetic {
    /// The tokens greedy decoding generates for the request (ignoring EOS), from a plain run.
    pub continuation: Vec<u32>,
    /// Per draft position: the probability the draft is right given the drafts before it
    /// were; the last rate applies to later positions.
    pub rates: Vec<f64>,
    /// Seeds the right/wrong draws (the same drafts every run).
    pub seed: u64,
    /// The vocabulary's size: a wrong draft is another id below it.
    pub vocab_size: u32,
}

/// Rates are checked to lie in 0 ..= 1 (never NaN), so equality is an equivalence.
impl Eq for Synthetic {}

impl Synthetic {
    /// Errors: no rate, a rate outside 0 ..= 1, a vocabulary of fewer than 2 tokens.
    pub fn new(
        continuation: Vec<u32>,
        rates: Vec<f64>,
        seed: u64,
        vocab_size: u32,
    ) -> Result<Self> {
        if rates.is_empty() {
            bail!("--spec-synth-rates: give at least one rate");
        }
        if let Some(r) = rates.iter().find(|r| !(0.0..=1.0).contains(*r)) {
            bail!("--spec-synth-rates {r}: a rate is between 0 and 1");
        }
        if vocab_size < 2 {
            bail!("a synthetic draft needs a vocabulary of at least 2 tokens");
        }
        Ok(Synthetic {
            continuation,
            rates,
            seed,
            vocab_size,
        })
    }

    /// Up to `k` drafts for a sequence that has generated `generated` tokens.
    pub fn propose(&self, generated: usize, k: usize) -> Vec<u32> {
        let mut drafts = Vec::with_capacity(k);
        for p in 0..k {
            let Some(&right) = self.continuation.get(generated + p) else {
                break;
            };
            let rate = self.rates[p.min(self.rates.len() - 1)];
            let u = unit(self.seed, (generated + p) as u64, p as u64);
            drafts.push(if u < rate {
                right
            } else {
                (right + 1) % self.vocab_size
            });
        }
        drafts
    }

    /// `0.9,0.8`: the rates as the flag takes them.
    pub fn rates_label(&self) -> String {
        let r: Vec<String> = self.rates.iter().map(|r| format!("{r}")).collect();
        r.join(",")
    }
}

/// A uniform draw in [0, 1) from `(seed, index, position)` (splitmix64's finalizer).
fn unit(seed: u64, index: u64, position: u64) -> f64 {
    let mut z = seed
        ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ position.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_of_one_and_zero_give_right_and_wrong_drafts() {
        let cont: Vec<u32> = (10..30).collect();
        let all = Synthetic::new(cont.clone(), vec![1.0], 7, 100).unwrap();
        assert_eq!(all.propose(3, 4), vec![13, 14, 15, 16]);
        assert_eq!(
            all.propose(18, 4),
            vec![28, 29],
            "stops at the continuation's end"
        );
        let none = Synthetic::new(cont, vec![0.0], 7, 100).unwrap();
        assert_eq!(none.propose(0, 2), vec![11, 12]);
    }

    #[test]
    fn a_rate_is_the_fraction_of_right_drafts() {
        let cont = vec![5u32; 20_000];
        let s = Synthetic::new(cont, vec![0.3], 1, 10).unwrap();
        let right = (0..20_000).filter(|&g| s.propose(g, 1) == [5]).count();
        assert!((right as f64 / 20_000.0 - 0.3).abs() < 0.02, "{right}");
    }

    #[test]
    fn bad_rates_are_refused() {
        assert!(Synthetic::new(vec![], vec![], 0, 10).is_err());
        assert!(Synthetic::new(vec![], vec![1.5], 0, 10).is_err());
        assert!(Synthetic::new(vec![], vec![0.5], 0, 1).is_err());
    }
}
