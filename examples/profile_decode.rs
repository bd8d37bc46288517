//! Where the time goes, on the default model.
//!
//!     cargo run --release --example profile_decode            # decode: matvecs per kind (GB/s, timed in the step's order), whole step; then prefill
//!     cargo run --release --example profile_decode prefill    # prefill: GEMM rates (candle vs ours), TTFT at 37/128/512 tokens
//!     cargo run --release --example profile_decode prefill model   # TTFT only
//!     cargo run --release --example profile_decode steps      # 1,000 decode steps (for perf record)
use anyhow::Result;
use candle_core::{Device, Tensor};
use nanollm::kernels::gemm::DenseMatrix;
use nanollm::kernels::matmul::matmul_group;
use nanollm::kv::{KvCache, KvDtype};
use nanollm::model::gguf::GgufFile;
use nanollm::model::source;
use std::time::Instant;

fn main() -> Result<()> {
    let dev = Device::Cpu;
    let path = source::resolve(None)?;
    let only_prefill = std::env::args().nth(1).as_deref() == Some("prefill");
    let mut g = GgufFile::open(&path)?;
    g.dense_prefill = false;
    let cfg = g.config()?;
    let w = g.weights(&cfg, &dev)?;
    if only_prefill {
        return prefill(&path, &cfg, &dev);
    }
    if std::env::args().nth(1).as_deref() == Some("steps") {
        let model = source::load(&path, &dev, false)?;
        let mut cache = KvCache::new(cfg.kv_shape(KvDtype::F16), 16, cfg.max_position_embeddings)?;
        model.decoder.forward(&[1, 2, 3, 4], 0, &mut cache)?;
        let t = Instant::now();
        for i in 0..1000 {
            model.decoder.forward(&[5], 4 + i, &mut cache)?;
        }
        println!(
            "1000 decode steps: {:.2} ms/step",
            t.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let x = Tensor::randn(0f32, 1., (1, 576), &dev)?;
    let xi = Tensor::randn(0f32, 1., (1, 1536), &dev)?;
    let q = |l: &nanollm::model::linear::Linear| l.quant.clone().expect("quantized weights");
    let layers: Vec<_> = w
        .layers
        .iter()
        .map(|l| {
            [
                q(&l.attention.gqa().expect("GQA").q_proj),
                q(&l.attention.gqa().expect("GQA").k_proj),
                q(&l.attention.gqa().expect("GQA").v_proj),
                q(&l.attention.gqa().expect("GQA").o_proj),
                q(&l.ffn.dense().expect("dense FFN").gate_proj),
                q(&l.ffn.dense().expect("dense FFN").up_proj),
                q(&l.ffn.dense().expect("dense FFN").down_proj),
            ]
        })
        .collect();
    let head = q(&w.lm_head);
    let (xv, xiv): (Vec<f32>, Vec<f32>) =
        (x.flatten_all()?.to_vec1()?, xi.flatten_all()?.to_vec1()?);
    for in_pool in [false, true] {
        let mut steps = Vec::new();
        for _ in 0..100 {
            let t = Instant::now();
            let step = || -> Result<()> {
                for l in &layers {
                    matmul_group(&[&l[0], &l[1], &l[2]], &xv)?;
                    l[3].matmul(&xv)?;
                    matmul_group(&[&l[4], &l[5]], &xv)?;
                    l[6].matmul(&xiv)?;
                }
                head.matmul(&xv)?;
                Ok(())
            };
            if in_pool {
                rayon::scope(|_| step())?;
            } else {
                step()?;
            }
            steps.push(t.elapsed().as_secs_f64() * 1e3);
        }
        steps.sort_by(f64::total_cmp);
        println!(
        "matvecs of a step as the decoder groups them (4 per layer + LM head), {}: median {:.2} ms",
        if in_pool { "called from a pool thread" } else { "called from outside the pool" },
        steps[50]
    );
    }
    // Per kind, timed inside the step's own order (each kind's 30 matrices alone would stay
    // in a 32 MiB L3 between repetitions: QKV is 10.4 MB, O 6.6 MB, down 16.6 MB).
    rayon::scope(|_| -> Result<()> {
        let b = |rows: usize, cols: usize| (rows * cols / 32 * 20 * 30) as f64;
        let kinds = [
            ("QKV x30", b(960, 576)),
            ("o x30", b(576, 576)),
            ("gate+up x30", b(3072, 576)),
            ("down x30", b(576, 1536)),
            ("LM head (Q8_0)", (49152 * 18 * 34) as f64),
        ];
        let mut per_step: Vec<[f64; 5]> = Vec::new();
        for _ in 0..50 {
            let mut t = [0f64; 5];
            let mut timed = |k: usize, f: &dyn Fn() -> Result<()>| -> Result<()> {
                let s = Instant::now();
                f()?;
                t[k] += s.elapsed().as_secs_f64();
                Ok(())
            };
            for l in &layers {
                timed(0, &|| matmul_group(&[&l[0], &l[1], &l[2]], &xv).map(|_| ()))?;
                timed(1, &|| l[3].matmul(&xv).map(|_| ()))?;
                timed(2, &|| matmul_group(&[&l[4], &l[5]], &xv).map(|_| ()))?;
                timed(3, &|| l[6].matmul(&xiv).map(|_| ()))?;
            }
            timed(4, &|| head.matmul(&xv).map(|_| ()))?;
            per_step.push(t);
        }
        for (k, (name, bytes)) in kinds.iter().enumerate() {
            let mut v: Vec<f64> = per_step.iter().map(|t| t[k]).collect();
            v.sort_by(f64::total_cmp);
            println!(
                "  {name}: median {:.3} ms, {:.1} GB/s",
                v[25] * 1e3,
                bytes / v[25] / 1e9
            );
        }
        Ok(())
    })?;
    let model = source::load(&path, &dev, false)?;
    let mut cache = KvCache::new(cfg.kv_shape(KvDtype::F16), 16, cfg.max_position_embeddings)?;
    model.decoder.forward(&[1, 2, 3, 4], 0, &mut cache)?;
    let mut steps = Vec::new();
    for i in 0..200 {
        let t = Instant::now();
        model.decoder.forward(&[5], 4 + i, &mut cache)?;
        steps.push(t.elapsed().as_secs_f64() * 1e3);
    }
    steps.sort_by(f64::total_cmp);
    println!(
        "whole decode step (200 steps): median {:.2} ms, p10 {:.2} ms, p90 {:.2} ms",
        steps[100], steps[20], steps[180]
    );
    prefill(&path, &cfg, &dev)
}

/// TTFT-like timing: one forward over P prompt tokens on the dense prefill kernels.
fn prefill(
    path: &std::path::Path,
    cfg: &nanollm::model::config::ModelConfig,
    dev: &Device,
) -> Result<()> {
    let gemms = std::env::args().nth(2).as_deref() != Some("model");
    for p in [128usize, 512].into_iter().filter(|_| gemms) {
        let x = Tensor::randn(0f32, 1., (p, 576), dev)?;
        let xi = Tensor::randn(0f32, 1., (p, 1536), dev)?;
        let w = |o: usize, i: usize| Tensor::randn(0f32, 1., (o, i), dev);
        let (wq, wk, wv, wo, wg, wu, wd) = (
            w(576, 576)?,
            w(192, 576)?,
            w(192, 576)?,
            w(576, 576)?,
            w(1536, 576)?,
            w(1536, 576)?,
            w(576, 1536)?,
        );
        let (wqkv, wgu) = (w(960, 576)?, w(3072, 576)?);
        let pk = |m: &Tensor| -> Result<DenseMatrix> {
            let (r, c) = m.dims2()?;
            DenseMatrix::pack(&m.flatten_all()?.to_vec1()?, r, c)
        };
        let ours: Vec<DenseMatrix> = [&wq, &wk, &wv, &wo, &wg, &wu]
            .iter()
            .map(|m| pk(m))
            .collect::<Result<_>>()?;
        let ours_down = pk(&wd)?;
        let (xs, xis): (Vec<f32>, Vec<f32>) =
            (x.flatten_all()?.to_vec1()?, xi.flatten_all()?.to_vec1()?);
        let mut best = (f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..3 {
            let t = Instant::now();
            for _ in 0..30 {
                for m in [&wq, &wk, &wv, &wo, &wg, &wu] {
                    x.matmul(&m.t()?)?;
                }
                xi.matmul(&wd.t()?)?;
            }
            let sep = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            rayon::scope(|_| -> Result<()> {
                for _ in 0..30 {
                    for m in [&wqkv, &wo, &wgu] {
                        x.matmul(&m.t()?)?;
                    }
                    xi.matmul(&wd.t()?)?;
                }
                Ok(())
            })?;
            let fused = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            rayon::scope(|_| -> Result<()> {
                for _ in 0..30 {
                    for m in &ours {
                        m.matmul(&xs)?;
                    }
                    ours_down.matmul(&xis)?;
                }
                Ok(())
            })?;
            let packed = t.elapsed().as_secs_f64() * 1e3;
            best = (best.0.min(sep), best.1.min(fused), best.2.min(packed));
        }
        let gflop = 2.0 * p as f64 * 30.0 * 576.0 * (960.0 + 576.0 + 3072.0 + 1536.0) / 1e9;
        let rate = |ms: f64| gflop / ms * 1e3;
        println!(
            "P={p}: 30 layers of dense GEMMs ({gflop:.1} GFLOP, weights cache-resident): candle separate {:.1} ms ({:.0} GFLOP/s), candle QKV and gate/up fused {:.1} ms ({:.0}), ours packed {:.1} ms ({:.0})",
            best.0, rate(best.0), best.1, rate(best.1), best.2, rate(best.2)
        );
    }
    let model = source::load(path, dev, true)?;
    for p in [37usize, 128, 512] {
        let tokens: Vec<u32> = (0..p as u32).map(|i| 100 + i * 7 % 5000).collect();
        let mut times = Vec::new();
        for _ in 0..3 {
            let mut cache =
                KvCache::new(cfg.kv_shape(KvDtype::F16), 16, cfg.max_position_embeddings)?;
            let t = Instant::now();
            model.decoder.forward(&tokens, 0, &mut cache)?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "prefill of {p} tokens (dense f32 prompt kernels): median of 3 {:.1} ms",
            times[1]
        );
    }
    Ok(())
}
