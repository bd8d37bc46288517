//! Prompt lookup: draft the tokens that followed the most recent earlier occurrence of the
//! sequence's last `n` tokens (vLLM's `ngram` proposer; llama.cpp's `ngram-simple`). It
//! pays where the output copies its input: edits, summaries, code changes.

/// Up to `k` draft tokens for `tokens`: for `n` from `max` down to `min`, the last `n`
/// tokens are looked for earlier in `tokens`; of the matches of the longest `n` that has
/// any, the latest one followed by `k` tokens proposes them (near the end of a repeated
/// run no match is, and the one followed by the most tokens proposes what follows it).
/// Empty when no suffix matches. Cost: one scan of `tokens` per `n` tried, `O(len · max)`.
pub fn propose(tokens: &[u32], min: usize, max: usize, k: usize) -> Vec<u32> {
    let len = tokens.len();
    // No suffix of `len` tokens or more can occur earlier: start below it.
    for n in (min.max(1)..=max.min(len.saturating_sub(1))).rev() {
        let suffix = &tokens[len - n..];
        let mut best: Option<(usize, usize)> = None;
        // A match at `start` ends before the suffix does, so at least one token follows it.
        for start in (0..len - n).rev() {
            if &tokens[start..start + n] != suffix {
                continue;
            }
            let from = start + n;
            let to = (from + k).min(len);
            if best.is_none_or(|(f, t)| to - from > t - f) {
                best = Some((from, to));
            }
            if to - from == k {
                break;
            }
        }
        if let Some((from, to)) = best {
            return tokens[from..to].to_vec();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::propose;

    #[test]
    fn the_latest_longest_match_proposes_what_followed_it() {
        // "1 2 3 9 ... 1 2 3 7 8 ... 2 3" : the 2-token suffix "2 3" last occurred before 7.
        let t = [1, 2, 3, 9, 5, 1, 2, 3, 7, 8, 4, 2, 3];
        assert_eq!(propose(&t, 1, 3, 2), vec![7, 8]);
        // Longer suffixes first: "4 2 3" never occurred before, "2 3" did.
        assert_eq!(propose(&t, 2, 3, 5), vec![7, 8, 4, 2, 3]);
    }

    #[test]
    fn a_huge_longest_suffix_costs_no_more_than_the_sequence() {
        let t = [1, 2, 3, 9, 5, 1, 2, 3, 7, 8, 4, 2, 3];
        assert_eq!(propose(&t, 1, usize::MAX, 2), vec![7, 8]);
    }

    #[test]
    fn no_match_or_a_too_short_sequence_proposes_nothing() {
        assert!(propose(&[1, 2, 3, 4], 1, 3, 4).is_empty());
        assert!(propose(&[5], 1, 3, 4).is_empty());
        assert!(propose(&[], 1, 3, 4).is_empty());
    }

    #[test]
    fn drafts_stop_at_the_end_of_the_sequence() {
        // "7 7": the suffix "7" last occurred at index 0, followed by 7 only.
        assert_eq!(propose(&[7, 7], 1, 1, 5), vec![7]);
        // In a run of one token the latest match has one token after it, an earlier one k.
        assert_eq!(propose(&[7, 7, 7, 7], 1, 1, 3), vec![7, 7, 7]);
        assert_eq!(propose(&[7, 7, 7, 7], 2, 2, 3), vec![7, 7]);
    }
}
