//! Issue 5: Hugging Face folders and hub ids (Llama, Mistral, Qwen2, Qwen3 in safetensors),
//! GGUF qwen2/qwen3, against candle-transformers' own implementations.
//!
//! Run: `cargo test --release --test hf_models` (the default-model test needs
//! `scripts/install-model.sh`).
#[path = "../common/mod.rs"]
mod common;
mod default_model;
mod gguf_archs;
mod gguf_write;
mod hub_cache;
mod kv_bytes;
mod oracle;
mod ours;
mod reference;
mod tiny;
