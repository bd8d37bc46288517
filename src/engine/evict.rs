//! Which runs may evict token rows (`--kv-evict`, [`crate::kv::evict`]): the combinations
//! refused up front, each with one line.
use crate::engine::CacheConfig;
use crate::kv::evict::EvictState;
use crate::kv::KvCache;
use crate::model::{Decoder, ModelConfig};
use anyhow::{bail, Result};

/// Refuse `cache.evict` where it cannot run: with speculative decoding (`speculative`: a
/// verify step's rows cross eviction points and are rolled back), and a policy that scores
/// keys by attention on a model whose attention does not log plain queries (MLA's latent
/// attention).
///
/// Errors: one line naming the flags.
pub fn check(cache: &CacheConfig, speculative: bool, model: &ModelConfig) -> Result<()> {
    let Some(e) = cache.evict else {
        return Ok(());
    };
    if speculative {
        bail!("--kv-evict cannot be combined with speculative decoding (--spec): a verify step's rows would cross eviction points");
    }
    if e.policy.needs_queries() && model.mla.is_some() {
        bail!(
            "--kv-evict {}: this policy scores keys with attention probabilities, which MLA's latent attention does not produce; use streaming, knorm or random",
            e.policy.name()
        );
    }
    Ok(())
}

/// One forward pass of `tokens` at the end of `cache` (positions below `prompt_end` on the
/// prompt kernels), logging the queries `evict`'s policy reads, then letting it evict when
/// the new length is an eviction point; the last row's logits, `[vocab_size]`. Without
/// `evict`, a plain forward pass. The caller keeps a chunk within the next eviction point
/// ([`crate::kv::evict::EvictState::next_point`]).
///
/// Errors: as [`Decoder::forward_logits`].
pub fn forward_step(
    decoder: &Decoder,
    tokens: &[u32],
    prompt_end: usize,
    cache: &mut KvCache,
    evict: Option<&mut EvictState>,
) -> Result<Vec<f32>> {
    let start = cache.len();
    let last = tokens.len().saturating_sub(1);
    let log = evict.as_ref().map(|e| &e.log);
    let logits = decoder.forward_observed(tokens, (start, prompt_end), cache, last, log)?;
    if let Some(e) = evict {
        e.after_commit(&mut cache.pool, &mut cache.table);
    }
    Ok(logits)
}

/// The end of chunk that starts at `start` and may run up to `end`: never past `evict`'s
/// next eviction point.
pub fn chunk_end(start: usize, end: usize, evict: Option<&EvictState>) -> usize {
    evict.map_or(end, |e| end.min(e.next_point(start)))
}
