//! Which runs may evict token rows (`--kv-evict`, [`crate::kv::evict`]): the combinations
//! refused up front, each with one line.
use crate::engine::CacheConfig;
use crate::model::ModelConfig;
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
