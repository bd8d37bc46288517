//! How a command runs its model: the KV cache's dtype and block size, the prefill kernels
//! and the CPU threads (`generate`, `bench`, `perplexity` spell these flags out themselves;
//! `run-batch` and `serve` flatten [`RuntimeArgs`]).
use crate::engine::CacheConfig;
use crate::kv::codec::parse_runtime_dtype;
use crate::kv::MAX_BLOCK_SIZE;
use crate::model::quantize_at_load::InSitu;
use crate::model::{source, Loaded};
use anyhow::{bail, Result};
use clap::Args;

/// How the engine runs its model: KV dtype and block size, prefill kernels, CPU threads
/// (`run-batch` and `serve`).
#[derive(Args, Debug, Clone)]
pub struct RuntimeArgs {
    /// How the KV cache stores K and V: f32, f16, bf16, q8_0, q4_0, iq4_nl, q4_0r or iq4_nlr
    /// (r: Hadamard-rotated in groups of up to 128 values before quantizing).
    #[arg(
        long,
        value_name = "f32|f16|bf16|q8_0|q4_0|iq4_nl|q4_0r|iq4_nlr",
        default_value = "f16"
    )]
    pub kv_cache_dtype: String,
    /// Tokens per block of the paged KV cache (1 to 256).
    #[arg(long, default_value_t = crate::kv::DEFAULT_BLOCK_SIZE)]
    pub block_size: usize,
    /// Sliding-window layers (Gemma 3) keep every block and apply their window as a mask,
    /// as llama.cpp's --swa-full does; by default they hold only the window's blocks and
    /// read only its keys. The same tokens either way.
    #[arg(long)]
    pub swa_full: bool,
    #[arg(long, value_name = "POLICY:budget=N", help = KV_EVICT_HELP)]
    pub kv_evict: Option<String>,
    /// Matrix kernels for prefill (see `nanollm generate --help`).
    #[arg(long, value_enum, default_value_t = PrefillKernel::Quantized)]
    pub prefill_kernel: PrefillKernel,
    /// Quantize a Hugging Face folder's matrices at load (see `nanollm generate --help`).
    #[arg(long, value_name = "q8_0|q4_0|q4_k")]
    pub quantize: Option<InSitu>,
    /// CPU threads [default: RAYON_NUM_THREADS when set, else the number of physical cores].
    #[arg(long)]
    pub threads: Option<usize>,
}

impl RuntimeArgs {
    /// The KV cache settings. Errors: an unknown dtype, a block size outside 1 to 256.
    pub fn cache(&self) -> Result<CacheConfig> {
        cache_config(&self.kv_cache_dtype, self.block_size, self.swa_full)?
            .with_evict(self.kv_evict.as_deref())
    }
}

/// Which kernels prefill runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefillKernel {
    /// Per request, by prompt length: quantized below 128 tokens, dense from there on.
    // The help text states AUTO_DENSE_PROMPT_TOKENS (tested below).
    Auto,
    /// f32 GEMM over weights dequantized at load (an f32 copy: 4 bytes per weight).
    Dense,
    /// The GGUF quantized kernels (the default: no f32 copy).
    Quantized,
}

/// `--prefill-kernel auto`'s threshold: prompts of at least this many tokens run on the
/// dense f32 GEMM. Below it the quantized kernels (eight rows per pass over the weights)
/// are faster than streaming the 424 MB f32 copy; on an AVX-512 VNNI Xeon they were faster
/// at every length measured, hence `quantized` as the default, with no f32 copy; `auto`
/// keeps the copy for long prompts (measured: docs/benchmarks.md, "Quantized kernels
/// against the dense f32 copy for prefill").
pub const AUTO_DENSE_PROMPT_TOKENS: usize = 128;

impl PrefillKernel {
    /// Whether the weights need their dense f32 prefill copy.
    pub fn loads_dense_copy(self) -> bool {
        self != PrefillKernel::Quantized
    }

    /// The decoder's [`crate::model::Decoder::set_dense_prompt_min_tokens`] for this choice.
    pub fn dense_prompt_min_tokens(self) -> usize {
        match self {
            PrefillKernel::Auto => AUTO_DENSE_PROMPT_TOKENS,
            PrefillKernel::Dense => 0,
            PrefillKernel::Quantized => usize::MAX,
        }
    }

    /// Load the model at `path` for this choice, a Hugging Face folder's matrices quantized
    /// under `quantize` (`--quantize`). Errors: as [`source::load_with`].
    pub fn load(self, path: &std::path::Path, quantize: Option<InSitu>) -> Result<Loaded> {
        let opts = source::LoadOptions {
            dense_prefill: self.loads_dense_copy(),
            dtype: None,
            quantize,
        };
        let mut model = source::load_with(path, &candle_core::Device::Cpu, opts)?;
        model
            .decoder
            .set_dense_prompt_min_tokens(self.dense_prompt_min_tokens());
        Ok(model)
    }
}

/// The KV cache settings from `--kv-cache-dtype`, `--block-size` and `--swa-full`. Errors:
/// an unknown or kv-size-only dtype, a block size outside 1..=256; each names its flag.
pub fn cache_config(dtype: &str, block_size: usize, swa_full: bool) -> Result<CacheConfig> {
    let dtype = parse_runtime_dtype("--kv-cache-dtype", dtype)?;
    if !(1..=MAX_BLOCK_SIZE).contains(&block_size) {
        bail!("--block-size {block_size}: expected 1 to {MAX_BLOCK_SIZE} tokens");
    }
    Ok(CacheConfig {
        dtype,
        block_size,
        swa_full,
        evict: None,
    })
}

/// The help of `--kv-evict`, shared by every command that takes it.
pub const KV_EVICT_HELP: &str = "Evict token rows from the KV cache, freeing blocks: \
POLICY:budget=N[,sinks=N,window=N,every=N,seed=N]. Policies: streaming (sinks + recent), \
snapkv (attention of the prompt's last `window` queries), h2o (accumulated attention), tova \
(the newest query's attention), knorm (smallest key norms), random. budget: rows kept per \
layer, a count or a share of the prompt (50%); applied at the prompt's end and every \
`every` (16) generated tokens. Example: streaming:budget=256,sinks=4";

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    /// `--prefill-kernel auto`'s help states the threshold in words: it must be the constant.
    #[test]
    fn the_auto_help_states_the_threshold() {
        let help = PrefillKernel::Auto
            .to_possible_value()
            .and_then(|v| v.get_help().map(|h| h.to_string()))
            .unwrap_or_default();
        assert!(
            help.contains(&format!("below {AUTO_DENSE_PROMPT_TOKENS} tokens")),
            "{help}"
        );
    }
}
