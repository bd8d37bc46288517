//! Our decoder driven the two ways the engine drives it, returning every step's logits.
use candle_core::Device;
use nanollm::engine::{self, CacheConfig, DecodeMode, Request, SamplingParams};
use nanollm::kv::{KvCache, KvDtype};
use nanollm::model::decoder::logits_vec;
use nanollm::model::source::{self, LoadOptions};
use nanollm::model::{Loaded, WeightDtype};
use std::path::Path;
use std::sync::atomic::AtomicBool;

/// Load a folder or GGUF as `generate` does (dense prefill), with matrices in `dtype`.
pub fn load(path: &Path, dtype: Option<WeightDtype>) -> Loaded {
    match source::load_with(
        path,
        &Device::Cpu,
        LoadOptions {
            dense_prefill: true,
            dtype,
            quantize: None,
        },
    ) {
        Ok(m) => m,
        Err(e) => panic!("cannot load {}: {e:#}", path.display()),
    }
}

/// KV-cached: prefill `prompt`, then one token of `cont` per step. `1 + cont.len()` logit
/// vectors (after the prompt, then after each fed token).
pub fn kv_cached(m: &Loaded, prompt: &[u32], cont: &[u32]) -> Vec<Vec<f32>> {
    kv_cached_with(m, prompt, cont, prompt.len())
}

/// A cache for `m` in blocks of 16 tokens: sliding-window layers holding only their
/// window's blocks, or, with `swa_full`, every block.
pub fn cache(m: &Loaded, swa_full: bool) -> KvCache {
    let c = m.decoder.config();
    KvCache::with_groups(c.kv_shape(KvDtype::F32), c.kv_groups(swa_full), 16, 4096)
        .expect("kv cache")
}

/// [`kv_cached`] with every block of sliding-window layers kept (`--swa-full`).
pub fn kv_cached_swa_full(m: &Loaded, prompt: &[u32], cont: &[u32]) -> Vec<Vec<f32>> {
    kv_cached_in(m, prompt, cont, prompt.len(), cache(m, true))
}

/// [`kv_cached`] with positions below `prompt_end` on the prefill kernels.
pub fn kv_cached_with(
    m: &Loaded,
    prompt: &[u32],
    cont: &[u32],
    prompt_end: usize,
) -> Vec<Vec<f32>> {
    kv_cached_in(m, prompt, cont, prompt_end, cache(m, false))
}

fn kv_cached_in(
    m: &Loaded,
    prompt: &[u32],
    cont: &[u32],
    prompt_end: usize,
    mut cache: KvCache,
) -> Vec<Vec<f32>> {
    let d = &m.decoder;
    let mut out = vec![logits_vec(
        &d.forward_with(prompt, 0, prompt_end, &mut cache)
            .expect("prefill"),
    )
    .expect("logits")];
    for &t in cont {
        let pos = cache.len();
        let l = d
            .forward_with(&[t], pos, prompt_end, &mut cache)
            .expect("decode step");
        out.push(logits_vec(&l).expect("logits"));
    }
    out
}

/// Naive: the whole sequence from an empty cache at every step.
pub fn naive(m: &Loaded, prompt: &[u32], cont: &[u32]) -> Vec<Vec<f32>> {
    let d = &m.decoder;
    (0..=cont.len())
        .map(|k| {
            let ids: Vec<u32> = prompt.iter().chain(&cont[..k]).copied().collect();
            let mut cache = cache(m, false);
            logits_vec(
                &d.forward_with(&ids, 0, prompt.len(), &mut cache)
                    .expect("forward"),
            )
            .expect("logits")
        })
        .collect()
}

/// Greedy tokens from the engine, end-of-sequence ignored.
pub fn engine_greedy(m: &Loaded, prompt: &[u32], n: usize, mode: DecodeMode) -> engine::Generation {
    let request = Request {
        prompt_ids: prompt.to_vec(),
        max_new_tokens: n,
        sampling: SamplingParams::greedy(),
        mode,
        cache: nanollm::engine::CacheConfig::default(),
        stop_token_ids: Vec::new(),
        stop_strings: Vec::new(),
        ignore_eos: true,
        speculative: Default::default(),
    };
    engine::generate(
        &m.decoder,
        &m.tokenizer,
        &request,
        &AtomicBool::new(false),
        |_| Ok(()),
    )
    .expect("generate")
}

/// A greedy KV-cached request for `n` tokens that ignores EOS, with `cache`'s settings.
pub fn request(prompt: &[u32], n: usize, cache: CacheConfig) -> Request {
    Request {
        prompt_ids: prompt.to_vec(),
        max_new_tokens: n,
        sampling: SamplingParams::greedy(),
        mode: DecodeMode::KvCache,
        cache,
        stop_token_ids: Vec::new(),
        stop_strings: Vec::new(),
        ignore_eos: true,
        speculative: Default::default(),
    }
}

/// `req` run alone through `generate`.
pub fn alone(m: &Loaded, req: &Request) -> engine::Generation {
    engine::generate(
        &m.decoder,
        &m.tokenizer,
        req,
        &AtomicBool::new(false),
        |_| Ok(()),
    )
    .expect("generate")
}
