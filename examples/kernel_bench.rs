//! ns per block of our Q4_1 matvec kernel on one thread (no rayon), vs memory size.
use nanollm::kernels::matmul::QuantMatrix;
use std::time::Instant;
fn main() -> anyhow::Result<()> {
    for (rows, cols) in [(1536usize, 576usize), (576, 1536), (49152, 576)] {
        let blocks = rows * cols / 32;
        let bytes: Vec<u8> = (0..blocks * 20).map(|i| (i * 7 % 251) as u8).collect();
        let m = QuantMatrix::from_ggml_bytes(&bytes, rows, cols)?;
        let x: Vec<f32> = (0..cols).map(|i| (i as f32).sin()).collect();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
        let reps = 200;
        let t = Instant::now();
        pool.install(|| {
            for _ in 0..reps {
                let _ = m.matmul(&x);
            }
        });
        let ns = t.elapsed().as_nanos() as f64 / (reps * blocks) as f64;
        println!("{rows}x{cols}: {ns:.2} ns/block, {:.2} GB/s", 20.0 / ns);
    }
    for threads in [1usize, 2] {
        let (rows, cols) = (64usize, 576usize);
        let bytes: Vec<u8> = (0..rows * cols / 32 * 20)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let m = QuantMatrix::from_ggml_bytes(&bytes, rows, cols)?;
        let x: Vec<f32> = (0..cols).map(|i| (i as f32).sin()).collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        let reps = 2000;
        let t = Instant::now();
        pool.install(|| {
            for _ in 0..reps {
                let _ = m.matmul(&x);
            }
        });
        println!(
            "tiny 64x576 call, {threads} threads: {:.1} us/call",
            t.elapsed().as_secs_f64() * 1e6 / reps as f64
        );
    }
    Ok(())
}

#[allow(dead_code)]
fn overhead() {}
