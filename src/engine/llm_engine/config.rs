//! [`EngineConfig`]: how an [`LlmEngine`](super::LlmEngine) is sized (KV pool, limits,
//! prefix caching, the disk tier), and the defaults of its queue flags.
use crate::engine::scheduler::SchedulerConfig;

/// How the engine is sized: KV pool, limits, prefix caching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// KV dtype and block size of the pool (every request shares them).
    pub cache: crate::engine::CacheConfig,
    /// Blocks in the pool (the KV budget, `--kv-mem` / block bytes).
    pub num_blocks: usize,
    /// Most tokens one sequence may hold (`--max-model-len`), ≤ the model's context window.
    pub max_model_len: usize,
    /// Queue limits and prefix caching.
    pub scheduler: SchedulerConfig,
    /// The prefix cache's disk tier (`--kv-offload-dir`): opened by [`LlmEngine::new`](super::LlmEngine::new), so
    /// every engine of a process (bench's runs) starts from what the directory holds.
    /// `'static` so the configuration stays plain `Copy` data: a command leaks this one
    /// small value for its lifetime.
    pub offload: Option<&'static crate::kv::offload::OffloadConfig>,
    /// Speculative decoding (`--spec`): drafts for every decoding sequence, verified in its
    /// step ([`crate::engine::spec`]); None for plain decoding.
    pub speculative: Option<crate::engine::spec::Speculative>,
}

/// Default `--max-num-seqs` (vLLM's default is 256 on GPUs; 2 CPU cores saturate far below).
pub const DEFAULT_MAX_NUM_SEQS: usize = 16;

/// Default `--max-num-batched-tokens`: 128 tokens, a prefill chunk of ~250–300 ms on this
/// project's 2-core machine, so running sequences wait at most that long for their next
/// token while a long prompt arrives.
pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: usize = 128;
