//! The portable kernels (what a CPU without AVX2 runs), forced with
//! `NANOLLM_PORTABLE_KERNELS`, through the same oracles as the SIMD ones: quantized logits
//! against candle-transformers' `quantized_llama` (same top-1 token, cosine > 0.9995,
//! max |Δlogit| < 1.0) and naive == KV-cached greedy decoding, token for token.
mod common;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use nanollm::engine::{self, CacheConfig, DecodeMode, Request, SamplingParams};
use nanollm::kv::{KvCache, KvDtype};
use nanollm::model::llama::logits_vec;
use std::sync::atomic::AtomicBool;

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
        .unwrap_or(0)
}

#[test]
fn portable_kernels_pass_the_oracles() {
    // One test in this binary: the switch is read once, before any kernel runs.
    std::env::set_var("NANOLLM_PORTABLE_KERNELS", "1");
    assert!(nanollm::kernels::portable_forced());

    // Quantized logits against candle's model from the same GGUF.
    let ours = common::quantized_model();
    let path = common::model_path();
    let mut file = std::fs::File::open(&path).expect("open model");
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).expect("gguf");
    let mut reference = ModelWeights::from_gguf(content, &mut file, &Device::Cpu).expect("ref");
    let prompt = ours
        .tokenizer
        .encode("The capital of France is Paris. The capital of Germany is")
        .expect("encode");
    let mut cache = KvCache::new(ours.config().kv_shape(KvDtype::F16), 16, 4096).expect("kv");
    let l = logits_vec(
        &ours
            .decoder
            .forward(&prompt, 0, &mut cache)
            .expect("forward"),
    )
    .expect("vec");
    let input = Tensor::new(prompt.as_slice(), &Device::Cpu)
        .and_then(|t| t.unsqueeze(0))
        .expect("input");
    let r = logits_vec(
        &reference
            .forward(&input, 0)
            .and_then(|t| t.squeeze(0))
            .expect("ref"),
    )
    .expect("vec");
    let d = l
        .iter()
        .zip(&r)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    let dot: f32 = l.iter().zip(&r).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let cos = dot / (norm(&l) * norm(&r));
    eprintln!("portable kernels: max |Δlogit| = {d}, cosine = {cos}");
    assert_eq!(argmax(&l), argmax(&r));
    assert!(cos > 0.9995, "cosine {cos}");
    assert!(d < 1.0, "max |Δlogit| {d}");

    // Naive and KV-cached greedy decoding agree on the portable kernels too (dense prefill,
    // f16 KV cache read back by the portable attention).
    let m = common::model();
    let tokens = |mode| {
        let req = Request {
            prompt_ids: m
                .tokenizer
                .encode("Once upon a time, in a small village")
                .expect("encode"),
            max_new_tokens: 16,
            sampling: SamplingParams::greedy(),
            mode,
            cache: CacheConfig::default(),
            stop_token_ids: Vec::new(),
            stop_strings: Vec::new(),
            ignore_eos: true,
        };
        let stop = AtomicBool::new(false);
        engine::generate(&m.decoder, &m.tokenizer, &req, &stop, |_| Ok(()))
            .expect("generate")
            .tokens
    };
    let kv = tokens(DecodeMode::KvCache);
    assert_eq!(kv.len(), 16);
    assert_eq!(kv, tokens(DecodeMode::Naive));
}
