//! The oracle: candle-transformers' own implementations (models::llama, mistral, qwen2, qwen3)
//! built from the same config.json and safetensors with a VarBuilder, in f32, each with its
//! own KV cache.
use crate::tiny::Arch;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{gemma3, llama, mistral, mixtral, qwen2, qwen3, qwen3_moe};
use std::path::Path;

pub enum Reference {
    Llama(llama::Llama, llama::Cache, llama::Config),
    Mistral(mistral::Model),
    Qwen2(qwen2::ModelForCausalLM),
    Qwen3(qwen3::ModelForCausalLM),
    Gemma3(gemma3::Model),
    Qwen3Moe(qwen3_moe::ModelForCausalLM),
    /// candle's Mixtral has no way to clear its cache: the folder, to load it again.
    Mixtral(mixtral::Model, std::path::PathBuf),
}

impl Reference {
    /// Build from the folder `dir` (config.json + model.safetensors), weights cast to f32.
    pub fn load(arch: Arch, dir: &Path) -> Reference {
        let dev = Device::Cpu;
        let text = std::fs::read_to_string(dir.join("config.json")).expect("config.json");
        let tensors = candle_core::safetensors::load(dir.join("model.safetensors"), &dev)
            .expect("safetensors");
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &dev);
        match arch {
            Arch::Llama => {
                let cfg: llama::LlamaConfig = serde_json::from_str(&text).expect("llama config");
                let cfg = cfg.into_config(false);
                let model = llama::Llama::load(vb, &cfg).expect("llama");
                let cache = llama::Cache::new(true, DType::F32, &cfg, &dev).expect("cache");
                Reference::Llama(model, cache, cfg)
            }
            Arch::Mistral => {
                let cfg: mistral::Config = serde_json::from_str(&text).expect("mistral config");
                Reference::Mistral(mistral::Model::new(&cfg, vb).expect("mistral"))
            }
            Arch::Qwen2 => {
                let cfg: qwen2::Config = serde_json::from_str(&text).expect("qwen2 config");
                Reference::Qwen2(qwen2::ModelForCausalLM::new(&cfg, vb).expect("qwen2"))
            }
            Arch::Qwen3 => {
                let cfg: qwen3::Config = serde_json::from_str(&text).expect("qwen3 config");
                Reference::Qwen3(qwen3::ModelForCausalLM::new(&cfg, vb).expect("qwen3"))
            }
            Arch::Gemma3 => {
                let cfg: gemma3::Config = serde_json::from_str(&text).expect("gemma3 config");
                Reference::Gemma3(gemma3::Model::new(false, &cfg, vb).expect("gemma3"))
            }
            Arch::Qwen3Moe => {
                let cfg: qwen3_moe::Config = serde_json::from_str(&text).expect("qwen3_moe config");
                Reference::Qwen3Moe(qwen3_moe::ModelForCausalLM::new(&cfg, vb).expect("qwen3_moe"))
            }
            Arch::Mixtral => {
                let cfg: mixtral::Config = serde_json::from_str(&text).expect("mixtral config");
                let model = mixtral::Model::new(&cfg, vb).expect("mixtral");
                Reference::Mixtral(model, dir.to_path_buf())
            }
        }
    }

    /// Forget the KV cache (start a new sequence).
    pub fn reset(&mut self) {
        match self {
            Reference::Llama(_, cache, cfg) => {
                *cache = llama::Cache::new(true, DType::F32, cfg, &Device::Cpu).expect("cache");
            }
            Reference::Mistral(m) => m.clear_kv_cache(),
            Reference::Qwen2(m) => m.clear_kv_cache(),
            Reference::Qwen3(m) => m.clear_kv_cache(),
            Reference::Gemma3(m) => m.clear_kv_cache(),
            Reference::Qwen3Moe(m) => m.clear_kv_cache(),
            Reference::Mixtral(_, dir) => {
                let dir = dir.clone();
                *self = Reference::load(Arch::Mixtral, &dir);
            }
        }
    }

    /// Feed `ids` at positions `pos ..` (the cache holds `pos` tokens); logits of the last.
    /// Gemma 3 is fed one token at a time: candle's full-attention KV cache of `gemma3`
    /// refuses the several-row (non-contiguous) K and V of a prompt ("slice-set only
    /// supports contiguous tensors").
    pub fn forward(&mut self, ids: &[u32], pos: usize) -> Vec<f32> {
        if let (Reference::Gemma3(_), [_, _, ..]) = (&*self, ids) {
            let mut last = Vec::new();
            for (k, &t) in ids.iter().enumerate() {
                last = self.forward(&[t], pos + k);
            }
            return last;
        }
        let x = Tensor::new(ids, &Device::Cpu)
            .and_then(|t| t.unsqueeze(0))
            .expect("ids");
        let logits = match self {
            Reference::Llama(m, cache, _) => m.forward(&x, pos, cache),
            Reference::Mistral(m) => m.forward(&x, pos),
            Reference::Qwen2(m) => m.forward(&x, pos),
            Reference::Qwen3(m) => m.forward(&x, pos),
            Reference::Gemma3(m) => m.forward(&x, pos),
            Reference::Qwen3Moe(m) => m.forward(&x, pos),
            Reference::Mixtral(m, _) => m.forward(&x, pos),
        }
        .expect("reference forward");
        logits
            .to_dtype(DType::F32)
            .and_then(|l| l.flatten_all())
            .and_then(|l| l.to_vec1())
            .expect("logits")
    }
}

/// Index of the largest value.
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Largest value minus the second largest.
pub fn top2_margin(v: &[f32]) -> f32 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| b.total_cmp(a));
    s[0] - s[1]
}

/// max |a − b| over two equally long vectors.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "logit vectors differ in length");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
