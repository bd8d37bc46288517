//! The dense product of a few prompt rows through an LM-head-sized Q8_0 matrix (SmolLM2's
//! 49,152 × 576): over the f32 copy (113 MB) against straight from the blocks (30 MB; the
//! same bits, asserted): `cargo run --release --example lm_head_row [rows]` (default 1, the
//! last prompt row every prefill computes logits for).
use anyhow::{anyhow, Result};
use nanollm::kernels::gemm::DenseMatrix;
use nanollm::kernels::matmul::QuantMatrix;
use std::time::Instant;

fn main() -> Result<()> {
    let (rows, cols) = (49_152usize, 576usize);
    let n: usize = std::env::args()
        .nth(1)
        .map_or(Ok(1), |s| s.parse())
        .map_err(|e| anyhow!("rows: {e}"))?;
    let mut bytes = Vec::new();
    for b in 0..rows * cols / 32 {
        bytes.extend(half::f16::from_f32(0.01 + (b % 97) as f32 * 1e-4).to_le_bytes());
        bytes.extend((0..32).map(|j| ((b * 31 + j * 17) % 256) as u8));
    }
    let q = QuantMatrix::from_ggml_q8_0_bytes(&bytes, rows, cols)?;
    let dense = DenseMatrix::pack(&q.dequantize(), rows, cols)?;
    let x: Vec<f32> = (0..n * cols).map(|i| (i % 13) as f32 * 0.1).collect();
    for round in 1..=5 {
        let (mut copy, mut blocks) = (Vec::new(), Vec::new());
        for _ in 0..10 {
            let t = Instant::now();
            let a = dense.matmul(&x)?;
            copy.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let Some(b) = q.dense_matmul(&x) else {
                println!("the dense product from the blocks does not run on this CPU");
                return Ok(());
            };
            let b = b?;
            blocks.push(t.elapsed().as_secs_f64() * 1e3);
            if a != b {
                return Err(anyhow!("the two paths gave different bits"));
            }
        }
        copy.sort_by(f64::total_cmp);
        blocks.sort_by(f64::total_cmp);
        println!(
            "round {round}, {n} row(s): f32 copy median {:.2} ms (min {:.2}), blocks median {:.2} ms (min {:.2})",
            copy[5], copy[0], blocks[5], blocks[0]
        );
    }
    Ok(())
}
