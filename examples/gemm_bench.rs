//! GFLOP/s of the packed prefill GEMM at the default model's shapes (random weights, one
//! layer's matrices, repeated), for P prompt rows: `cargo run --release --example gemm_bench
//! [P]`; `RAYON_NUM_THREADS=1` for one core; `COPIES=30` cycles through 30 copies of the
//! matrices (the model's 30 layers: 424 MB, past the caches, as in a real prefill).
use nanollm::kernels::gemm::DenseMatrix;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let p: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(128);
    // (out, in): fused QKV, o_proj, fused gate/up, down_proj.
    let shapes = [(960usize, 576usize), (576, 576), (3072, 576), (576, 1536)];
    let fill = |n: usize, s: f32| (0..n).map(|i| (i as f32 * s).sin()).collect::<Vec<f32>>();
    let copies: usize = std::env::var("COPIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mats: Vec<(DenseMatrix, Vec<f32>)> = (0..copies)
        .flat_map(|_| shapes.iter())
        .map(|&(o, i)| {
            Ok((
                DenseMatrix::pack(&fill(o * i, 0.37), o, i)?,
                fill(p * i, 0.11),
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    let flop: f64 = shapes.iter().map(|&(o, i)| 2.0 * (p * o * i) as f64).sum();
    for round in 0..5 {
        let reps = 20usize.div_ceil(copies);
        let mut per = vec![0f64; shapes.len()];
        let t = Instant::now();
        for _ in 0..reps {
            for (j, (m, x)) in mats.iter().enumerate() {
                let t = Instant::now();
                std::hint::black_box(m.matmul(x)?);
                per[j % shapes.len()] += t.elapsed().as_secs_f64();
            }
        }
        let s = t.elapsed().as_secs_f64();
        let each: Vec<String> = shapes
            .iter()
            .zip(&per)
            .map(|(&(o, i), t)| {
                format!(
                    "{o}x{i} {:.0}",
                    2.0 * (p * o * i) as f64 * (reps * copies) as f64 / t / 1e9
                )
            })
            .collect();
        println!(
            "round {round}: P={p} {:.1} GFLOP/s overall; per matrix GFLOP/s: {}",
            flop * (reps * copies) as f64 / s / 1e9,
            each.join(", ")
        );
    }
    Ok(())
}
