//! [`accept_rows`]: a verify step's rows accepted in order while they agree with the drafts
//! — the one loop the batched engine and `generate` both run.
use super::{Accepted, Logits};
use crate::engine::sampling::rejection::DraftRng;
use crate::engine::FinishReason;
use anyhow::Result;

/// How a verify step ended for one sequence.
#[derive(Debug)]
pub struct Verdict {
    /// Drafts kept (the accepted tokens are `kept + 1` unless the logits were unsampleable).
    pub kept: usize,
    /// Why the request ends here, if it does.
    pub finish: Option<FinishReason>,
    /// Logits that could not be sampled (a NaN): the request fails alone.
    pub unsampleable: Option<anyhow::Error>,
}

/// Accept `logits`' rows (`[1 + drafts, vocab]`: row `i` predicts the token after the
/// step's `i`-th input) through `accept`, in order, while each row's token equals the draft
/// it checks. A row whose draft was sampled from a draft model (`q[i]` given) is judged by
/// rejection sampling ([`Logits::Judged`], draws from `rng`); any other row is sampled as a
/// one-token step would be ([`Logits::RowRef`]: greedy and prompt-lookup drafts).
///
/// Errors: as `accept`.
pub fn accept_rows(
    logits: &[f32],
    vocab: usize,
    drafts: &[u32],
    q: &[Vec<f32>],
    rng: &mut DraftRng,
    mut accept: impl FnMut(Logits<'_>) -> Result<Accepted>,
) -> Result<Verdict> {
    let mut verdict = Verdict {
        kept: 0,
        finish: None,
        unsampleable: None,
    };
    for (row, chunk) in logits.chunks_exact(vocab.max(1)).enumerate() {
        let input = match (drafts.get(row), q.get(row)) {
            (Some(&draft), Some(q)) => Logits::Judged {
                row: chunk,
                draft,
                q,
                rng: &mut *rng,
            },
            _ => Logits::RowRef(chunk),
        };
        let right = |token| drafts.get(row) == Some(&token);
        match accept(input)? {
            Accepted::Token {
                token,
                finish: None,
            } if right(token) => verdict.kept += 1,
            Accepted::Token { finish: None, .. } => break,
            Accepted::Token {
                token,
                finish: Some(reason),
            } => {
                // A draft the request ends on (EOS, a stop string, its length) was right.
                verdict.kept += usize::from(right(token));
                verdict.finish = Some(reason);
                break;
            }
            Accepted::Unsampleable(e) => {
                verdict.unsampleable = Some(e);
                break;
            }
        }
    }
    Ok(verdict)
}
