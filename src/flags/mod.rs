//! Flags that more than one command takes, as clap `Args` structs and value types, below
//! both `cli` and `serve` so that neither reaches into the other: the batched engine's
//! ([`engine::EngineArgs`], vLLM's names) and how a model runs ([`runtime::RuntimeArgs`]:
//! KV dtype, block size, prefill kernels, threads).
pub mod engine;
pub mod mla;
pub mod offload;
pub mod runtime;
pub mod spec;

pub use engine::{token_count, EngineArgs};
pub use mla::MlaPathArg;
pub use offload::OffloadArgs;
pub use runtime::{cache_config, PrefillKernel, RuntimeArgs, AUTO_DENSE_PROMPT_TOKENS};
pub use spec::SpecArgs;
