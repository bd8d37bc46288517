//! The batched engine's flags, shared by `run-batch` and `bench --concurrency/--scenario`
//! (vLLM's names: `--max-num-seqs`, `--max-num-batched-tokens`, `--max-model-len`,
//! `--enable-prefix-caching` / `--no-enable-prefix-caching`; `--kv-mem` is the KV budget,
//! vLLM's `--kv-cache-memory`).
use crate::engine::llm_engine::{
    EngineConfig, SchedulerConfig, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS,
};
use crate::engine::CacheConfig;
use crate::model::ModelConfig;
use crate::units::{group_digits, human_bytes, parse_bytes};
use anyhow::{bail, Context, Result};
use clap::Args;

/// A token count flag's value in kv-size's grammar (`4096`, `4k` = 4,096, `1m`; `0` is
/// passed on for the flag's own check). Errors: clap's, with the reason.
pub fn token_count(s: &str) -> Result<usize, String> {
    crate::units::parse_tokens("TOKENS", s).map_err(|e| {
        let msg = e.to_string();
        let prefix = format!("TOKENS '{s}': ");
        msg.strip_prefix(&prefix).unwrap_or(&msg).to_string()
    })
}

/// Flags of the batched engine.
#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    /// Most sequences decoding at once (continuous batching), ≥ 1.
    #[arg(long, default_value_t = DEFAULT_MAX_NUM_SEQS, value_name = "N")]
    pub max_num_seqs: usize,
    /// Token budget of one engine step (decode tokens + prefill chunk tokens): a longer
    /// prompt is prefilled in chunks while running sequences keep decoding (chunked prefill).
    #[arg(long, default_value_t = DEFAULT_MAX_NUM_BATCHED_TOKENS, value_name = "TOKENS", value_parser = token_count)]
    pub max_num_batched_tokens: usize,
    /// KV-cache budget, e.g. 512MiB or 2GiB: the pool's blocks (address space is reserved,
    /// memory is used block by block) [default: room for --max-num-seqs sequences of
    /// --max-model-len tokens, at most half the machine's memory].
    #[arg(long, value_name = "BYTES", allow_hyphen_values = true)]
    pub kv_mem: Option<String>,
    /// Most tokens per sequence (prompt + generated) [default: the model's context window].
    #[arg(long, value_name = "TOKENS", value_parser = token_count)]
    pub max_model_len: Option<usize>,
    /// Share full prompt blocks between requests (automatic prefix caching; the default).
    #[arg(long, overrides_with = "no_enable_prefix_caching")]
    pub enable_prefix_caching: bool,
    /// Turn automatic prefix caching off.
    #[arg(long, overrides_with = "enable_prefix_caching")]
    pub no_enable_prefix_caching: bool,
    /// The prefix cache's disk tier.
    #[command(flatten)]
    pub offload: crate::flags::OffloadArgs,
    /// Speculative decoding.
    #[command(flatten)]
    pub spec: crate::flags::SpecArgs,
}

impl EngineArgs {
    /// Whether prefix caching is on (it is unless `--no-enable-prefix-caching`).
    pub fn prefix_caching(&self) -> bool {
        !self.no_enable_prefix_caching
    }

    /// `e` with the flags that sized the KV budget in front: the `--kv-mem` value when one
    /// was given, else `--max-num-seqs` and `--max-model-len` (resolved: `max_model_len`).
    /// A budget the OS cannot reserve fails when the engine is built.
    pub fn blame_kv_mem(&self, max_model_len: usize, e: anyhow::Error) -> anyhow::Error {
        match &self.kv_mem {
            Some(m) => e.context(format!("--kv-mem {m}")),
            None => e.context(format!(
                "the default KV budget (room for --max-num-seqs {} sequences of --max-model-len {max_model_len} tokens); set --kv-mem or lower them",
                self.max_num_seqs
            )),
        }
    }

    /// The engine configuration for a model of `config` with `cache`.
    ///
    /// Errors: `--max-num-seqs 0`, `--max-num-batched-tokens 0`, a `--max-model-len` of 0 or
    /// past the context window, a `--kv-mem` that does not parse or holds less than one
    /// block; each names its flag.
    pub fn engine_config(&self, model: &ModelConfig, cache: CacheConfig) -> Result<EngineConfig> {
        self.engine_config_with(model, None, cache)
    }

    /// [`Self::engine_config`] for an engine that also runs `draft` (`--spec draft`): the
    /// default budget (no `--kv-mem`) grows by the draft's blocks, so the model keeps room
    /// for `--max-num-seqs` sequences; a `--kv-mem` is shared between the two.
    ///
    /// Errors: as [`Self::engine_config`].
    pub fn engine_config_with(
        &self,
        model: &ModelConfig,
        draft: Option<&ModelConfig>,
        cache: CacheConfig,
    ) -> Result<EngineConfig> {
        if self.max_num_seqs == 0 {
            bail!("--max-num-seqs 0: must be at least 1");
        }
        if self.max_num_batched_tokens == 0 {
            bail!("--max-num-batched-tokens 0: must be at least 1");
        }
        let context = model.max_position_embeddings;
        let max_model_len = self.max_model_len.unwrap_or(context);
        if max_model_len == 0 || max_model_len > context {
            bail!("--max-model-len {max_model_len}: must be 1 to the model's context window of {context} tokens");
        }
        // A block holds one layer group's rows (every layer unless the model is hybrid).
        let groups = model.kv_groups(cache.swa_full);
        let shape = model.kv_shape(cache.dtype);
        let block_bytes = (shape.bytes_per_token_per_layer() as u128)
            * groups.layers_per_block as u128
            * cache.block_size as u128;
        let num_blocks = match &self.kv_mem {
            Some(s) => {
                let bytes = parse_bytes("--kv-mem", s)? as u128;
                let blocks = bytes / block_bytes.max(1);
                if blocks == 0 {
                    bail!(
                        "--kv-mem {s}: smaller than one KV block ({}: {} tokens of {} bytes)",
                        human_bytes(u64::try_from(block_bytes).unwrap_or(u64::MAX)),
                        cache.block_size,
                        group_digits(
                            u64::try_from(block_bytes / cache.block_size as u128)
                                .unwrap_or(u64::MAX)
                        )
                    );
                }
                usize::try_from(blocks).unwrap_or(usize::MAX)
            }
            None => {
                let per_seq = groups.max_blocks_for(
                    max_model_len,
                    self.max_num_batched_tokens,
                    cache.block_size,
                );
                let wanted = self.max_num_seqs.checked_mul(per_seq).with_context(|| {
                    format!(
                        "--max-num-seqs {} × --max-model-len {max_model_len}: a default KV budget past 2^64 blocks; set --kv-mem or lower them",
                        self.max_num_seqs
                    )
                })?;
                let ram = crate::process::physical_memory();
                let capped = default_blocks(wanted, per_seq, block_bytes, ram);
                if let (true, Some(ram)) = (capped < wanted, ram) {
                    let gib =
                        |blocks: usize| blocks as f64 * block_bytes as f64 / (1u64 << 30) as f64;
                    eprintln!(
                        "note: default KV budget capped at {:.2} GiB, half of this machine's {:.2} GiB ({} sequences of {max_model_len} tokens would take {:.2} GiB); set --kv-mem to choose",
                        gib(capped),
                        ram as f64 / (1u64 << 30) as f64,
                        self.max_num_seqs,
                        gib(wanted)
                    );
                }
                match draft {
                    Some(d) => {
                        crate::engine::llm_engine::blocks_with_draft(model, d, &cache, capped)
                    }
                    None => capped,
                }
            }
        };
        Ok(EngineConfig {
            cache,
            num_blocks,
            max_model_len,
            scheduler: SchedulerConfig {
                max_num_seqs: self.max_num_seqs,
                max_num_batched_tokens: self.max_num_batched_tokens,
                enable_prefix_caching: self.prefix_caching(),
            },
            offload: None,
            speculative: self.spec.speculative()?,
        })
    }
}

/// The default KV budget in blocks: room for `wanted` blocks (--max-num-seqs sequences of
/// --max-model-len tokens), capped at half the machine's physical memory `ram` (bytes;
/// uncapped when unknown) — a 131,072-token model's 16 sequences would reserve 64 GiB —
/// but never below one whole sequence (`per_seq` blocks), so the longest request still
/// fits. The pool uses memory block by block; the cap bounds what it may claim, as vLLM's
/// `--gpu-memory-utilization` bounds its cache.
pub fn default_blocks(wanted: usize, per_seq: usize, block_bytes: u128, ram: Option<u64>) -> usize {
    let Some(ram) = ram else {
        return wanted;
    };
    let cap = usize::try_from(ram as u128 / 2 / block_bytes.max(1)).unwrap_or(usize::MAX);
    wanted.min(cap.max(per_seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_budget_is_capped_at_half_the_memory_but_holds_one_sequence() {
        let gib = 1u64 << 30;
        // 16 sequences of 8,192 blocks of 512 KiB (a 131,072-token model): 64 GiB wanted;
        // half of 24 GiB is 24,576 blocks.
        let block = 512u128 * 1024;
        assert_eq!(
            default_blocks(16 * 8192, 8192, block, Some(24 * gib)),
            24_576
        );
        // Room enough: uncapped; memory unknown: uncapped.
        assert_eq!(
            default_blocks(16 * 8192, 8192, block, Some(256 * gib)),
            16 * 8192
        );
        assert_eq!(default_blocks(16 * 8192, 8192, block, None), 16 * 8192);
        // Half the memory below one sequence: one sequence.
        assert_eq!(default_blocks(16 * 8192, 8192, block, Some(4 * gib)), 8192);
        #[cfg(target_os = "linux")]
        assert!(crate::process::physical_memory().is_some_and(|b| b > 0));
    }
}
