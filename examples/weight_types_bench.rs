//! Every GGUF weight type on our kernels, side by side: one 2048 × 2048 matrix (Llama-3.2-1B's
//! `attn_q`) of random weights quantized by candle (ggml's reference quantizers) to each type,
//! multiplied against 1 input (a decode step) and 8 (a batch, or a prompt tile) on rayon's
//! pool; medians of `ROUNDS` rounds, types alternating within each round.
//!
//! `cargo run --release --example weight_types_bench`: per type, bytes held per weight,
//! µs per product and the bytes held read per second.
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use nanollm::kernels::matmul::QuantMatrix;
use std::time::Instant;

const ROUNDS: usize = 15;

fn main() -> anyhow::Result<()> {
    let (rows, cols) = (2048usize, 2048usize);
    let w: Vec<f32> = (0..rows * cols)
        .map(|i| (i as f32 * 0.618).sin() * 0.05)
        .collect();
    let wt = Tensor::from_vec(w, (rows, cols), &Device::Cpu)?;
    let types = [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
        GgmlDType::Q2K,
        GgmlDType::Q3K,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
        GgmlDType::F16,
        GgmlDType::BF16,
    ];
    let mut mats = Vec::new();
    for t in types {
        let data = QTensor::quantize(&wt, t)?.data()?.to_vec();
        let ctor = match t {
            GgmlDType::Q4_0 => QuantMatrix::from_ggml_q4_0_bytes,
            GgmlDType::Q4_1 => QuantMatrix::from_ggml_bytes,
            GgmlDType::Q5_0 => QuantMatrix::from_ggml_q5_0_bytes,
            GgmlDType::Q5_1 => QuantMatrix::from_ggml_q5_1_bytes,
            GgmlDType::Q8_0 => QuantMatrix::from_ggml_q8_0_bytes,
            GgmlDType::Q2K => QuantMatrix::from_ggml_q2_k_bytes,
            GgmlDType::Q3K => QuantMatrix::from_ggml_q3_k_bytes,
            GgmlDType::Q4K => QuantMatrix::from_ggml_q4_k_bytes,
            GgmlDType::Q5K => QuantMatrix::from_ggml_q5_k_bytes,
            GgmlDType::Q6K => QuantMatrix::from_ggml_q6_k_bytes,
            GgmlDType::F16 => QuantMatrix::from_ggml_f16_bytes,
            _ => QuantMatrix::from_ggml_bf16_bytes,
        };
        mats.push((t, ctor(&data, rows, cols)?));
    }
    let x: Vec<f32> = (0..8 * cols).map(|i| (i as f32 * 0.37).cos()).collect();
    let mut times = vec![[Vec::new(), Vec::new()]; mats.len()];
    for _ in 0..ROUNDS {
        for (k, (_, m)) in mats.iter().enumerate() {
            for (j, n) in [1usize, 8].into_iter().enumerate() {
                let t = Instant::now();
                for _ in 0..4 {
                    std::hint::black_box(m.matmul(&x[..n * cols])?);
                }
                times[k][j].push(t.elapsed().as_secs_f64() * 1e6 / 4.0);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("| type | held bytes/weight | 1 input µs | GB/s | 8 inputs µs | µs per input |");
    println!("|---|---|---|---|---|---|");
    for ((t, m), tt) in mats.iter().zip(times.iter_mut()) {
        let (one, eight) = (median(&mut tt[0]), median(&mut tt[1]));
        println!(
            "| {t:?} | {:.4} | {one:.1} | {:.1} | {eight:.1} | {:.1} |",
            m.bytes() as f64 / (rows * cols) as f64,
            m.bytes() as f64 / one / 1e3,
            eight / 8.0
        );
    }
    Ok(())
}
