//! Every weight matrix of the default model through our kernels against candle's, one
//! matrix at a time, so a kernel error shows up here with its name instead of as drift in
//! the end-to-end logits:
//! - our quantized matvec (Q4_1 / Q8_0 weights, activations quantized per block of 32)
//!   against candle's `QMatMul::forward`, which quantizes the activations the same way
//!   (Q8_1 for Q4_1, Q8_0 for Q8_0: the same 8-bit codes) but stores each block's scale as
//!   f16, as ggml's `block_q8_1`/`block_q8_0` do, where ours keeps it in f32: relative error
//!   ≤ 5e-3 of the output's largest value (f16 rounds a scale by up to 2⁻¹¹ ≈ 4.9e-4, and
//!   outputs cancel; measured ≤ 2.3e-3 over the 211 matrices), and ours no less accurate than
//!   candle's against the f64 product (measured: worst 1.72e-2 against candle's 1.76e-2);
//! - our prefill GEMM over the dequantized, packed weights against the f64 product of the
//!   same dequantized weights: ≤ 1e-5;
//! - and, for the record, what the 8-bit activations cost: quantized against that f64
//!   product, ≤ 2e-2 (measured ~1e-2 at most; this bounds the end-to-end logit tolerances).
mod common;
use candle_core::quantized::QMatMul;
use candle_core::{Device, Module, Tensor};
use nanollm::model::gguf::GgufFile;
use nanollm::model::linear::Linear;

fn inputs(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..rows * cols)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Activations of a normed hidden state: a few units, some outliers.
            let u = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            u * 4.0 + if s.is_multiple_of(97) { 20.0 * u } else { 0.0 }
        })
        .collect()
}

/// max |a − b| / max |b|.
fn rel(a: &[f32], b: &[f64]) -> f64 {
    let scale = b.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - y).abs())
        .fold(0f64, f64::max)
        / scale
}

#[test]
fn every_matrix_matches_candle_and_the_f64_product() {
    let mut g = GgufFile::open(&common::model_path()).expect("open");
    g.dense_prefill = true;
    let cfg = g.config().expect("config");
    let w = g.weights(&cfg, &Device::Cpu).expect("weights");
    // Each matrix with its GGUF tensor's name (the tied LM head is the embedding's).
    let mut linears: Vec<(String, &Linear)> = vec![("token_embd".into(), &w.lm_head)];
    for (i, l) in w.layers.iter().enumerate() {
        for (name, lin) in [
            ("attn_q", &l.attention.gqa().expect("GQA").q_proj),
            ("attn_k", &l.attention.gqa().expect("GQA").k_proj),
            ("attn_v", &l.attention.gqa().expect("GQA").v_proj),
            ("attn_output", &l.attention.gqa().expect("GQA").o_proj),
            ("ffn_gate", &l.ffn.dense().expect("dense FFN").gate_proj),
            ("ffn_up", &l.ffn.dense().expect("dense FFN").up_proj),
            ("ffn_down", &l.ffn.dense().expect("dense FFN").down_proj),
        ] {
            linears.push((format!("blk.{i}.{name}"), lin));
        }
    }
    let n = 3;
    let (mut worst_q, mut worst_gemm, mut worst_act, mut worst_candle) = (0f64, 0f64, 0f64, 0f64);
    for (k, (name, lin)) in linears.iter().enumerate() {
        let q = lin
            .quant
            .as_ref()
            .expect("Q4_1/Q8_0 weights have our kernels");
        let (rows, cols) = q.dims();
        let x = inputs(n, cols, k as u64 + 1);
        let ours = q.matmul(&x).expect("matvec");
        let xt = Tensor::from_slice(&x, (n, cols), &Device::Cpu).expect("x");
        // candle's matrix, read from the file (the model keeps only ours).
        let candle = QMatMul::from_qtensor(
            g.qtensor(&format!("{name}.weight"), &Device::Cpu)
                .expect("tensor"),
        )
        .expect("qmatmul");
        let theirs: Vec<f64> = candle
            .forward(&xt)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .expect("candle")
            .into_iter()
            .map(f64::from)
            .collect();
        let dense = q.dequantize();
        let exact: Vec<f64> = (0..n)
            .flat_map(|v| {
                let (x, dense) = (&x, &dense);
                (0..rows).map(move |r| {
                    (0..cols)
                        .map(|c| dense[r * cols + c] as f64 * x[v * cols + c] as f64)
                        .sum::<f64>()
                })
            })
            .collect();
        let gemm = lin
            .packed
            .as_ref()
            .expect("dense copy")
            .matmul(&x)
            .expect("gemm");
        let (eq, eg, ea) = (rel(&ours, &theirs), rel(&gemm, &exact), rel(&ours, &exact));
        let theirs32: Vec<f32> = theirs.iter().map(|&v| v as f32).collect();
        let ec = rel(&theirs32, &exact);
        assert!(eq <= 5e-3, "{name}: quantized vs candle {eq:e}");
        assert!(eg <= 1e-5, "{name}: GEMM vs f64 {eg:e}");
        assert!(ea <= 2e-2, "{name}: quantized vs f64 {ea:e}");
        worst_q = worst_q.max(eq);
        worst_gemm = worst_gemm.max(eg);
        worst_act = worst_act.max(ea);
        worst_candle = worst_candle.max(ec);
    }
    assert!(
        worst_act <= 1.1 * worst_candle,
        "our 8-bit path is less accurate than candle's: {worst_act:e} vs {worst_candle:e}"
    );
    eprintln!(
        "{} matrices: quantized vs candle ≤ {worst_q:.2e}, GEMM vs f64 ≤ {worst_gemm:.2e}, 8-bit activations cost ≤ {worst_act:.2e} (candle's: {worst_candle:.2e}), relative to each output's max",
        linears.len()
    );
}
