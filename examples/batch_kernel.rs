//! Time of the quantized matrix kernels for one and eight inputs, on the default model's
//! matrix shapes (random weights), with rayon's threads: the batched decode step's matrix
//! cost without the rest of the step.
//!
//!     cargo run --release --example batch_kernel
use nanollm::kernels::matmul::{matmul_group, QuantMatrix};
use std::time::Instant;
fn main() -> anyhow::Result<()> {
    // On a rayon worker, as the model's forward pass runs (src/model/decoder/mod.rs).
    rayon::scope(|_| run())
}

fn run() -> anyhow::Result<()> {
    // (rows, cols, Q8_0?, matrices of this shape per step): SmolLM2-135M, 30 layers.
    let shapes = [
        (576usize, 576usize, false, 60usize), // q, o
        (192, 576, false, 60),                // k, v
        (1536, 576, false, 60),               // gate, up
        (576, 1536, false, 30),               // down
        (49152, 576, true, 1),                // LM head (Q8_0)
    ];
    for n in [1usize, 8] {
        let mut total = 0.0;
        for &(rows, cols, q8, per_step) in &shapes {
            let blocks = rows * cols / 32;
            let bb = if q8 { 34 } else { 20 };
            let mut bytes: Vec<u8> = (0..blocks * bb).map(|i| (i * 7 % 251) as u8).collect();
            // Normal f16 scales (and Q4_1 minimums), as a real model has: arbitrary bytes
            // there include NaNs, infinities and subnormals, which distort the timing.
            let scales = if q8 { 1 } else { 2 };
            for b in bytes.chunks_exact_mut(bb) {
                let scale = (0x2000u16 + b[4] as u16).to_le_bytes();
                for s in 0..scales {
                    b[2 * s..2 * s + 2].copy_from_slice(&scale);
                }
            }
            let max_copies: usize = std::env::var("COPIES")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(30);
            let copies: Vec<QuantMatrix> = (0..per_step.min(max_copies))
                .map(|_| {
                    if q8 {
                        QuantMatrix::from_ggml_q8_0_bytes(&bytes, rows, cols)
                    } else {
                        QuantMatrix::from_ggml_bytes(&bytes, rows, cols)
                    }
                })
                .collect::<anyhow::Result<_>>()?;
            let x: Vec<f32> = (0..n * cols).map(|i| (i as f32 * 0.1).sin()).collect();
            let reps = 20;
            let t = Instant::now();
            for _ in 0..reps {
                for m in &copies {
                    let _ = matmul_group(&[m], &x)?;
                }
            }
            let per = t.elapsed().as_secs_f64() / (reps * copies.len()) as f64;
            total += per * per_step as f64;
            println!(
                "n={n} {rows}x{cols}{}: {:.1} µs, {:.1} GB/s, {:.0} GOP/s",
                if q8 { " q8_0" } else { "" },
                per * 1e6,
                (blocks * bb) as f64 / per / 1e9,
                (2 * rows * cols * n) as f64 / per / 1e9
            );
        }
        println!("n={n}: matrices per step {:.2} ms", total * 1e3);
    }
    Ok(())
}
