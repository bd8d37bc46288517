//! Where a decode step's time goes: our Q4_1 matvecs, the Q8_0 LM head, and the whole step.
//!
//!     cargo run --release --example profile_decode
use anyhow::Result;
use candle_core::{Device, Module, Tensor};
use nanollm::kv::KvCache;
use nanollm::model::gguf::GgufFile;
use nanollm::model::source;
use std::time::Instant;

fn main() -> Result<()> {
    let dev = Device::Cpu;
    let path = source::resolve(None)?;
    let mut g = GgufFile::open(&path)?;
    g.dense_prefill = false;
    let cfg = g.config()?;
    let w = g.weights(&cfg, &dev)?;
    let x = Tensor::randn(0f32, 1., (1, 576), &dev)?;
    let xi = Tensor::randn(0f32, 1., (1, 1536), &dev)?;
    let reps = 20;
    let t = Instant::now();
    for _ in 0..reps {
        for l in &w.layers {
            for lin in [
                &l.q_proj,
                &l.k_proj,
                &l.v_proj,
                &l.o_proj,
                &l.gate_proj,
                &l.up_proj,
            ] {
                lin.forward(&x, 0)?;
            }
            l.down_proj.forward(&xi, 0)?;
        }
    }
    println!(
        "30 layers of Q4_1 matvecs: {:.2} ms",
        t.elapsed().as_secs_f64() * 1e3 / reps as f64
    );
    let t = Instant::now();
    for _ in 0..reps {
        w.lm_head.weight.forward(&x)?;
    }
    println!(
        "LM head (Q8_0, candle): {:.2} ms",
        t.elapsed().as_secs_f64() * 1e3 / reps as f64
    );
    let model = source::load(&path, &dev, false)?;
    let mut cache = KvCache::new(cfg.kv_shape(), 512, &dev);
    model.decoder.forward(&[1, 2, 3, 4], 0, &mut cache)?;
    let t = Instant::now();
    for i in 0..reps {
        model.decoder.forward(&[5], 4 + i, &mut cache)?;
    }
    println!(
        "whole decode step: {:.2} ms",
        t.elapsed().as_secs_f64() * 1e3 / reps as f64
    );
    Ok(())
}
