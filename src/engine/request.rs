//! [`Request`]: what one generation asks for, and how it ended.
use crate::engine::SamplingParams;
use crate::kv::{KvDtype, DEFAULT_BLOCK_SIZE};
use serde::Serialize;

/// How the engine stores a request's KV cache: the engine's choice, not the model's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheConfig {
    /// Stored dtype of K and V (`--kv-cache-dtype`, vLLM's flag): f32, f16, bf16, q8_0, q4_0, iq4_nl, q4_0r or
    /// iq4_nlr.
    #[serde(rename = "kv_cache_dtype")]
    pub dtype: KvDtype,
    /// Tokens per block of the paged pool (`--block-size`, vLLM's flag), 1 to 256.
    pub block_size: usize,
    /// Keep every block of sliding-window layers and apply their windows as masks
    /// (`--swa-full`, llama.cpp's flag); off: a sliding layer holds only its window's
    /// blocks. The same output bits either way.
    pub swa_full: bool,
    /// Token eviction (`--kv-evict`): which rows each sequence keeps; None keeps every row.
    #[serde(rename = "kv_evict")]
    pub evict: Option<crate::kv::evict::EvictConfig>,
}

impl Default for CacheConfig {
    /// f16 (llama.cpp's default KV type) in blocks of 16 tokens (vLLM's default).
    fn default() -> Self {
        CacheConfig {
            dtype: KvDtype::F16,
            block_size: DEFAULT_BLOCK_SIZE,
            swa_full: false,
            evict: None,
        }
    }
}

impl CacheConfig {
    /// This config with `--kv-evict`'s value parsed (None: no eviction).
    ///
    /// Errors: as [`crate::kv::evict::EvictConfig::parse`]; eviction with `--swa-full`
    /// (its sliding layers' windows are masks over positions, which evicted rows no longer
    /// are).
    pub fn with_evict(self, flag: Option<&str>) -> anyhow::Result<CacheConfig> {
        let evict = flag.map(crate::kv::evict::EvictConfig::parse).transpose()?;
        if evict.is_some() && self.swa_full {
            anyhow::bail!("--kv-evict cannot be combined with --swa-full: sliding layers mask by position, and evicted rows have none");
        }
        Ok(CacheConfig { evict, ..self })
    }
}

/// How the decode loop uses the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DecodeMode {
    /// Full recompute: every step runs the whole sequence through the model against an empty
    /// cache (O(T) work per step, O(T²) attention overall).
    Naive,
    /// Prefill fills the request's KV cache once; each decode step feeds one token.
    KvCache,
    /// `kv-cache` with every block of sliding-window layers kept and their windows applied
    /// as masks (the cache's `--swa-full`, llama.cpp's): the same tokens, the memory and
    /// attention time of a full cache. Against `kv-cache` on a long context it shows what
    /// reading only the window saves (Gemma 3, Mistral).
    SwaFull,
}

impl DecodeMode {
    /// The mode's name as used on the command line (`naive`, `kv-cache`, `swa-full`).
    pub fn name(self) -> &'static str {
        match self {
            DecodeMode::Naive => "naive",
            DecodeMode::KvCache => "kv-cache",
            DecodeMode::SwaFull => "swa-full",
        }
    }
}

/// One generation request.
#[derive(Debug, Clone)]
pub struct Request {
    /// The prompt's token ids (after the chat template and tokenization).
    pub prompt_ids: Vec<u32>,
    /// Most tokens to generate (≥ 1).
    pub max_new_tokens: usize,
    /// Sampling settings.
    pub sampling: SamplingParams,
    /// Naive or KV-cached decode.
    pub mode: DecodeMode,
    /// KV dtype and block size.
    pub cache: CacheConfig,
    /// Extra token ids that end generation as the tokenizer's EOS / end-of-turn ids do
    /// (vLLM's `stop_token_ids`; unlike those, they still end it with `ignore_eos`).
    pub stop_token_ids: Vec<u32>,
    /// Strings that end generation; the text stops before them.
    pub stop_strings: Vec<String>,
    /// Keep going past end-of-sequence tokens (benchmarks: always `max_new_tokens`, as
    /// vLLM's `ignore_eos` and llama-bench do).
    pub ignore_eos: bool,
    /// Speculative decoding for this request: the engine's `--spec` (the default), off, or
    /// its own settings (serve's `speculative` field, `generate --spec`).
    pub speculative: crate::engine::spec::SpecChoice,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model produced an end-of-sequence / end-of-turn token.
    Eos,
    /// The text reached a `--stop` string.
    StopString,
    /// `max_new_tokens` were generated.
    Length,
    /// The context window is full.
    ContextFull,
    /// Ctrl-C.
    Interrupted,
    /// This request failed alone (its logits could not be sampled: NaN from an overflow in
    /// the forward pass); the other requests of the batch go on. vLLM's `error` reason.
    Error,
}

impl FinishReason {
    /// The reason as printed by `--show-stats`: the same snake_case word as in `--json`
    /// (vLLM/OpenAI style: `eos`, `stop_string`, `length`, `context_full`, `interrupted`,
    /// `error`).
    pub fn name(self) -> &'static str {
        match self {
            FinishReason::Eos => "eos",
            FinishReason::StopString => "stop_string",
            FinishReason::Length => "length",
            FinishReason::ContextFull => "context_full",
            FinishReason::Interrupted => "interrupted",
            FinishReason::Error => "error",
        }
    }

    /// The reason as the server's `/v1/state` words it: [`Self::name`], except that a
    /// request ended from outside (its client went away, Ctrl-C) is `abort`, the word of
    /// `/metrics`' `finished_reason` label and of the completion's `finish_reason` (vLLM's).
    pub fn state_name(self) -> &'static str {
        match self {
            FinishReason::Interrupted => "abort",
            r => r.name(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--show-stats` and `--json` spell every finish reason the same way.
    #[test]
    fn finish_reason_names_match_the_json() {
        for r in [
            FinishReason::Eos,
            FinishReason::StopString,
            FinishReason::Length,
            FinishReason::ContextFull,
            FinishReason::Interrupted,
            FinishReason::Error,
        ] {
            assert_eq!(serde_json::json!(r), serde_json::json!(r.name()));
        }
    }
}
