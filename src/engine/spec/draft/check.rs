//! [`check_compatible`]: a draft model must speak the target's token ids.
use crate::model::{Decoder, Tokenizer};
use anyhow::{bail, Result};

/// Check that `draft` (read from `name`) can draft for `target`: the same vocabulary size
/// and the same token at every id (a draft from another tokenizer would propose ids that
/// mean other text). The draft's own context window may be shorter: drafting stops there.
///
/// Errors: one line naming `--draft-model` and the first difference.
pub fn check_compatible(
    target: (&Decoder, &Tokenizer),
    draft: (&Decoder, &Tokenizer),
    name: &str,
) -> Result<()> {
    let (vt, vd) = (target.0.config().vocab_size, draft.0.config().vocab_size);
    if vt != vd {
        bail!("--draft-model {name}: its vocabulary has {vd} tokens and the model's {vt}: a draft model must use the same token ids");
    }
    let ids = u32::try_from(vt).unwrap_or(u32::MAX);
    if let Some(id) = (0..ids).find(|&id| target.1.token_text(id) != draft.1.token_text(id)) {
        bail!(
            "--draft-model {name}: token {id} is {:?} there and {:?} in the model: a draft model must use the same vocabulary",
            draft.1.token_text(id),
            target.1.token_text(id)
        );
    }
    Ok(())
}
