//! A tiny random Llama with the default model's vocabulary, every matrix a K-quant (tests
//! that need a model fast enough to run thousands of times, or a K-quant file).
use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::path::Path;

pub fn inputs(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
        })
        .collect()
}

/// Write a tiny random Llama (hidden 256, 2 layers, 4 heads of 64, 2 KV heads, FFN 512;
/// the default model's tokenizer and vocabulary) whose every matrix is a K-quant — attn_q
/// and ffn_up Q4_K, attn_k Q5_K, attn_v, ffn_down and the tied embedding Q6_K, attn_output
/// Q3_K, ffn_gate Q2_K (candle's quantizers) — to `out`; with `f32`, the same weights
/// dequantized and stored as F32.
pub fn write_tiny_k_quant_llama(out: &Path, f32: bool) {
    write_tiny_llama_seeded(out, f32, 0, |_| {});
}

/// [`write_tiny_k_quant_llama`] with other random weights (`first_seed` > 0 gives a model
/// unrelated to the seed-0 one) and its metadata edited by `edit` before writing (a
/// vocabulary made to differ, say).
pub fn write_tiny_llama_seeded(
    out: &Path,
    f32: bool,
    first_seed: u64,
    edit: impl FnOnce(&mut std::collections::HashMap<String, gguf_file::Value>),
) {
    use gguf_file::Value;
    let mut file = std::fs::File::open(super::model_path()).expect("open model");
    let content = gguf_file::Content::read(&mut file).expect("read gguf");
    let mut metadata = content.metadata.clone();
    for (k, v) in [
        ("llama.embedding_length", 256),
        ("llama.feed_forward_length", 512),
        ("llama.attention.head_count", 4),
        ("llama.attention.head_count_kv", 2),
        ("llama.block_count", 2),
        ("llama.rope.dimension_count", 64),
    ] {
        metadata.insert(k.to_string(), Value::U32(v));
    }
    edit(&mut metadata);
    let mut seed = first_seed * 1000;
    let mut matrix = |rows: usize, cols: usize, dtype: GgmlDType| {
        seed += 1;
        let values = inputs(rows * cols, seed);
        let w = Tensor::from_vec(values, (rows, cols), &Device::Cpu)
            .and_then(|t| t.affine(0.05, 0.0))
            .expect("tensor");
        let q = QTensor::quantize(&w, dtype).expect("quantize");
        match f32 {
            true => QTensor::quantize(&q.dequantize(&Device::Cpu).expect("f32"), GgmlDType::F32)
                .expect("f32"),
            false => q,
        }
    };
    let ones = |n: usize| {
        QTensor::quantize(
            &Tensor::ones(n, candle_core::DType::F32, &Device::Cpu).expect("ones"),
            GgmlDType::F32,
        )
        .expect("f32")
    };
    let mut tensors: Vec<(String, QTensor)> = vec![
        (
            "token_embd.weight".into(),
            matrix(49152, 256, GgmlDType::Q6K),
        ),
        ("output_norm.weight".into(), ones(256)),
    ];
    for i in 0..2 {
        let p = format!("blk.{i}");
        for (name, t) in [
            ("attn_norm", ones(256)),
            ("ffn_norm", ones(256)),
            ("attn_q", matrix(256, 256, GgmlDType::Q4K)),
            ("attn_k", matrix(128, 256, GgmlDType::Q5K)),
            ("attn_v", matrix(128, 256, GgmlDType::Q6K)),
            ("attn_output", matrix(256, 256, GgmlDType::Q3K)),
            ("ffn_gate", matrix(512, 256, GgmlDType::Q2K)),
            ("ffn_up", matrix(512, 256, GgmlDType::Q4K)),
            ("ffn_down", matrix(256, 512, GgmlDType::Q6K)),
        ] {
            tensors.push((format!("{p}.{name}.weight"), t));
        }
    }
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut w = std::io::BufWriter::new(std::fs::File::create(out).expect("create"));
    gguf_file::write(&mut w, &md, &ts).expect("write gguf");
}
