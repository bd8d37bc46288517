//! Oracle on the quantized kernels: see tests/oracle_quantized_llama.rs for the f32 check
//! and why the quantized comparison has a noise-level tolerance.
mod common;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use nanollm::kv::{KvCache, KvDtype};
use nanollm::model::llama::logits_vec;

fn argmax(v: &[f32]) -> u32 {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap_or(0)
}

#[test]
fn quantized_logits_match_candle_quantized_llama_within_noise() {
    let ours = common::quantized_model();
    let path = common::model_path();
    let mut file = std::fs::File::open(&path).expect("open model");
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).expect("read gguf");
    let mut reference =
        ModelWeights::from_gguf(content, &mut file, &Device::Cpu).expect("load reference");
    let prompt = ours
        .tokenizer
        .encode("The capital of France is Paris. The capital of Germany is")
        .expect("encode");
    let mut cache = KvCache::new(ours.config().kv_shape(KvDtype::F32), 16, 4096).expect("kv cache");
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
    let cos = dot
        / (l.iter().map(|x| x * x).sum::<f32>().sqrt()
            * r.iter().map(|x| x * x).sum::<f32>().sqrt());
    eprintln!("quantized: max |Δlogit| = {d}, cosine = {cos}");
    assert_eq!(argmax(&l), argmax(&r));
    assert!(cos > 0.9995, "cosine similarity {cos}");
    // Measured 0.67 (2026-11-30, VNNI and AVX2 kernels alike: bit-identical). Each matrix's
    // 8-bit-activation cost is bounded directly in tests/oracle_kernels_per_matrix.rs.
    assert!(d < 1.0, "max |Δlogit| {d}");
}
