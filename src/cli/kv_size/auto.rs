//! `--dtype auto`: the KV dtype that follows a model's own dtype, as vLLM's.
use super::resolve::Model;
use crate::kv::KvDtype;

/// `--dtype auto`, as vLLM's `--kv-cache-dtype auto` with its `--dtype auto`: the model's own
/// dtype, bf16 for a `bfloat16` config.json, f16 for `float16` and `float32` ones (vLLM runs
/// float32 models in float16) and for a .gguf (llama.cpp's cache type); bf16 for a preset or
/// a shape whose dtype is not known (the presets are bf16 models).
pub(super) fn auto_dtype(model: &Model) -> KvDtype {
    match model.torch_dtype.as_deref().and_then(auto_follows) {
        Some(d) => d,
        None if model.gguf => KvDtype::F16,
        None => KvDtype::Bf16,
    }
}

/// The KV dtype `auto` takes for config.json's dtype `t`, when it follows it (a float dtype).
pub(super) fn auto_follows(t: &str) -> Option<KvDtype> {
    match t {
        "bfloat16" => Some(KvDtype::Bf16),
        "float16" | "float32" | "half" | "float" => Some(KvDtype::F16),
        _ => None,
    }
}
