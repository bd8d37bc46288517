//! What the transformers config classes default when a config.json leaves a field out:
//! `num_key_value_heads`, `max_position_embeddings` and `head_dim` per `model_type`.

/// `num_key_value_heads` when config.json leaves it out, for model types whose transformers
/// config class has a default of its own (MistralConfig and MixtralConfig: 8; GemmaConfig,
/// Gemma2Config, Gemma3TextConfig: 16); `None`: as many as the query heads.
pub(super) fn default_kv_heads(model_type: Option<&str>) -> Option<u64> {
    match model_type? {
        "mistral" | "mixtral" => Some(8),
        "gemma" | "gemma2" | "gemma3" | "gemma3_text" => Some(16),
        _ => None,
    }
}

/// `max_position_embeddings` when config.json leaves it out, as the transformers config class
/// defaults it (LlamaConfig 2048; MistralConfig, MixtralConfig 4096 · 32; Qwen2/Qwen3 and
/// their MoE configs 32768; GemmaConfig, Gemma2Config 8192; Gemma3TextConfig 131072;
/// Phi3Config 4096); `None`: unknown, `--seq` is then needed.
pub(super) fn default_max_positions(model_type: Option<&str>) -> Option<u64> {
    Some(match model_type? {
        "llama" => 2048,
        "mistral" | "mixtral" => 4096 * 32,
        "qwen2" | "qwen3" | "qwen2_moe" | "qwen3_moe" => 32768,
        "gemma" | "gemma2" => 8192,
        "gemma3" | "gemma3_text" => 131_072,
        "phi3" => 4096,
        _ => return None,
    })
}

/// `head_dim` when config.json leaves it out, where the transformers class defaults it
/// rather than deriving it (GemmaConfig, Gemma2Config, Gemma3TextConfig: 256); `None`:
/// hidden_size / num_attention_heads.
pub(super) fn default_head_dim(model_type: Option<&str>) -> Option<u64> {
    match model_type? {
        "gemma" | "gemma2" | "gemma3" | "gemma3_text" => Some(256),
        _ => None,
    }
}
