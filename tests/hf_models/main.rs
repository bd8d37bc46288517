//! Issue 5: Hugging Face folders and hub ids (Llama, Mistral, Qwen2, Qwen3 in safetensors),
//! GGUF qwen2/qwen3, against candle-transformers' own implementations; issue 14: RoPE
//! scaling (llama3, rope_parameters, GGUF rope_freqs, YaRN) and the chat prompt's BOS.
//!
//! Run: `cargo test --release --test hf_models` (the default-model test needs
//! `scripts/install-model.sh`).
mod bounded_state;
mod chat_bos;
#[path = "../common/mod.rs"]
mod common;
mod deepseek;
mod default_model;
mod evict_mask;
mod gemma3;
mod gemma3_engine;
mod gguf_archs;
mod gguf_damaged;
mod gguf_raw;
mod gguf_write;
mod gpt_oss;
mod gpt_oss_hf;
mod hub_cache;
mod in_situ;
mod kv_bytes;
mod moe;
mod moe_llama_cpp;
mod nan_logits;
mod oracle;
mod ours;
mod reference;
mod rope_scaling;
mod tiny;
