//! ns per (row-block · input) of our Q4_1 matvec with n inputs, one thread, L2-hot matrix.
use nanollm::kernels::matmul::QuantMatrix;
use std::time::Instant;
fn main() -> anyhow::Result<()> {
    let (rows, cols) = (256usize, 576usize);
    let blocks = rows * cols / 32;
    let bytes: Vec<u8> = (0..blocks * 20).map(|i| (i * 7 % 251) as u8).collect();
    let m = QuantMatrix::from_ggml_bytes(&bytes, rows, cols)?;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    for n in [1usize, 2, 4, 8, 16] {
        let x: Vec<f32> = (0..cols * n).map(|i| (i as f32).sin()).collect();
        let reps = 4000 / n;
        let t = Instant::now();
        pool.install(|| {
            for _ in 0..reps {
                let _ = m.matmul(&x);
            }
        });
        let ns = t.elapsed().as_nanos() as f64 / (reps * blocks * n) as f64;
        println!("n={n:2}: {ns:.3} ns per row-block per input");
    }
    Ok(())
}
