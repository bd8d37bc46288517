//! nanollm: run a real LLM on the CPU and make its KV cache visible and measurable.
//!
//! The KV cache belongs to the engine, not to the model: [`model::Decoder::forward`] takes the
//! per-request [`kv::KvCache`] to read and extend. Naive full-recompute decoding and KV-cached
//! decoding are the same loop with a different cache lifetime ([`engine`]).
pub mod bench;
pub mod cli;
pub mod engine;
pub mod eval;
pub mod kernels;
pub mod kv;
pub mod model;
pub mod openai;
pub mod roofline;
pub mod serve;
pub mod sizing;
