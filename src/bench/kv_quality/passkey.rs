//! The synthetic passkey set of `bench --kv-quality` (RULER's single needle, after Mohtashami
//! & Jaggi 2023, "Landmark Attention"): a five-digit key hidden at a depth of a filler text
//! of a given length, then the question; a case is retrieved when the greedy answer holds
//! the key. Generated here from fixed seeds, so every run and every configuration scores the
//! same cases.
use serde::Serialize;

/// The filler, repeated (the passkey papers' own sentences).
pub const FILLER: &str =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";

/// One case: its prompt text and the key it hides.
#[derive(Debug, Clone, Serialize)]
pub struct PasskeyCase {
    /// Filler sentences in the haystack (its length).
    pub filler: usize,
    /// Where the needle sits, as a share of the filler (0: first, 1: last).
    pub depth: f64,
    /// The five-digit key.
    pub key: String,
    /// The whole prompt.
    #[serde(skip)]
    pub prompt: String,
}

/// The cases: for each haystack of `filler` sentences in `lengths` and each depth in
/// `depths`, one key from `seed`.
pub fn cases(lengths: &[usize], depths: &[f64], seed: u64) -> Vec<PasskeyCase> {
    let mut state = seed ^ 0x5DEE_CE66_D1CE_4E5B;
    let mut out = Vec::new();
    for &filler in lengths {
        for &depth in depths {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = format!("{}", 10_000 + (state >> 33) % 90_000);
            let at = ((filler as f64) * depth).round() as usize;
            let mut prompt = String::from(
                "There is an important pass key hidden inside a lot of irrelevant text. Find it and memorize it.\n\n",
            );
            for i in 0..=filler {
                if i == at {
                    prompt +=
                        &format!("The pass key is {key}. Remember it. {key} is the pass key. ");
                }
                if i < filler {
                    prompt += FILLER;
                }
            }
            prompt += "\n\nWhat is the pass key? The pass key is";
            out.push(PasskeyCase {
                filler,
                depth,
                key,
                prompt,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_fixed_and_hide_their_key_once_at_their_depth() {
        let a = cases(&[4, 40], &[0.0, 0.5, 1.0], 1);
        assert_eq!(a.len(), 6);
        let b = cases(&[4, 40], &[0.0, 0.5, 1.0], 1);
        assert!(a.iter().zip(&b).all(|(x, y)| x.prompt == y.prompt));
        for c in &a {
            assert_eq!(c.prompt.matches(&c.key).count(), 2, "{c:?}");
            assert_eq!(c.key.len(), 5);
            let needle = c.prompt.find("The pass key is").unwrap_or(0);
            let before = c.prompt[..needle].matches(FILLER).count();
            assert_eq!(before, (c.filler as f64 * c.depth).round() as usize);
        }
    }
}
