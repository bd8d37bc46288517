//! The engine: one request's prefill and decode loop ([`generate`](generate::generate)), the
//! batched engine for many requests ([`llm_engine`]: continuous batching, chunked prefill,
//! prefix caching, preemption, with its [`scheduler`], [`prefix_cache`] and [`sequence`]s),
//! the one path both take to accept a sampled token ([`accept`]), request validation
//! ([`validate`]), sampling, stop strings, and the latency statistics of each step.
pub mod accept;
pub mod detokenizer;
pub mod evict;
pub mod generate;
pub mod generation;
pub mod llm_engine;
pub mod prefix_cache;
pub mod request;
pub mod sampling;
pub mod scheduler;
pub mod sequence;
pub mod snapshot;
pub mod spec;
pub mod stats;
pub mod step_output;
pub mod stop;
pub mod trace;
pub mod validate;

pub use generate::{generate, generate_with_draft};
pub use generation::{Generation, StepEvent};
pub use request::{CacheConfig, DecodeMode, FinishReason, Request};
pub use sampling::{Sampler, SamplingParams};
pub use stats::{GenerationStats, Percentiles};
