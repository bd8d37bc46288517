//! Oracle: our decoder against candle-transformers' quantized_llama on the default model
//! (same GGUF weights).
mod common;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use nanollm::kv::KvCache;
use nanollm::model::llama::logits_vec;

fn reference() -> ModelWeights {
    let path = common::model_path();
    let mut file = std::fs::File::open(&path).expect("open model");
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).expect("read gguf");
    ModelWeights::from_gguf(content, &mut file, &Device::Cpu).expect("load reference")
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i as u32).unwrap_or(0)
}

/// Largest |a - b| over the vocabulary.
fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn logits_and_32_greedy_tokens_match_candle_quantized_llama() {
    let model = common::model();
    let mut reference = reference();
    let prompt = model.tokenizer.encode("The capital of France is Paris. The capital of Germany is").expect("encode");
    let dev = Device::Cpu;

    // Prefill: last-position logits.
    let mut cache = KvCache::new(model.config().kv_shape(), 64, &dev);
    let ours = logits_vec(&model.decoder.forward(&prompt, 0, &mut cache).expect("forward")).expect("vec");
    let input = Tensor::new(prompt.as_slice(), &dev).and_then(|t| t.unsqueeze(0)).expect("input");
    let theirs = logits_vec(&reference.forward(&input, 0).expect("ref forward").squeeze(0).expect("squeeze")).expect("vec");
    let diff = max_abs_diff(&ours, &theirs);
    // Tolerance: both run the same Q4_1/Q8_0 kernels in f32; only the order of float
    // operations differs (pre-scaled Q, grouped GQA matmul), so 1e-3 on logits of size ~20.
    assert!(diff < 1e-3, "prefill logits differ by {diff}");

    // 32 greedy tokens, KV-cached in both.
    let (mut a, mut b) = (argmax(&ours), argmax(&theirs));
    let mut ours_tokens = vec![a];
    let mut theirs_tokens = vec![b];
    for _ in 1..32 {
        let pos = cache.len();
        let l = logits_vec(&model.decoder.forward(&[a], pos, &mut cache).expect("forward")).expect("vec");
        let input = Tensor::new(&[b], &dev).and_then(|t| t.unsqueeze(0)).expect("input");
        let r = logits_vec(&reference.forward(&input, pos).expect("ref").squeeze(0).expect("squeeze")).expect("vec");
        let d = max_abs_diff(&l, &r);
        assert!(d < 1e-3, "decode logits at position {pos} differ by {d}");
        a = argmax(&l);
        b = argmax(&r);
        ours_tokens.push(a);
        theirs_tokens.push(b);
    }
    assert_eq!(ours_tokens, theirs_tokens);
}
