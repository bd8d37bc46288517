//! The engine: a request's prefill and decode loop over a decoder and its KV cache, sampling,
//! and the latency statistics of each step.
pub mod engine;
pub mod request;
pub mod sampling;
pub mod scheduler;
pub mod sequence;
pub mod llm_engine;
pub mod stats;
pub mod stop;

pub use engine::{generate, Generation, StepEvent};
pub use request::{CacheConfig, DecodeMode, FinishReason, Request};
pub use sampling::{Sampler, SamplingParams};
pub use stats::{GenerationStats, Percentiles};
