//! Batched decode step time against batch size, on the default model: B sequences of a
//! 128-token prompt, then decode steps with all B in one forward pass.
//!
//!     cargo run --release --example batch_step            # B = 1, 2, 4, 8, 16
//!     cargo run --release --example batch_step 8 steps    # B = 8 only, 500 steps (for perf record)
use anyhow::Result;
use nanollm::kv::{BlockTable, KvDtype, KvPool};
use nanollm::model::{source, SeqChunk};
use std::time::Instant;

fn main() -> Result<()> {
    let model = source::load(&source::resolve(None)?, &candle_core::Device::Cpu, true)?;
    let cfg = model.config();
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<usize> = match args.get(1) {
        Some(b) => vec![b.parse()?],
        None => vec![1, 2, 4, 8, 16],
    };
    let steps = if args.get(2).map(String::as_str) == Some("steps") {
        500
    } else {
        32
    };
    let prompt: Vec<u32> = (0..128u32).map(|i| 100 + i * 7).collect();
    for b in sizes {
        let mut pool = KvPool::new(cfg.kv_shape(KvDtype::F16), 16, 4096)?;
        let mut tables: Vec<BlockTable> = (0..b).map(|_| BlockTable::new()).collect();
        for t in tables.iter_mut() {
            t.reserve(&mut pool, 128)?;
            let c = SeqChunk {
                tokens: &prompt,
                start_pos: 0,
                prompt_end: 128,
                table: t,
                logits_from: Some(127),
                observe: None,
                mask: None,
            };
            model.decoder.forward_batch(&mut pool, &[c])?;
            t.commit(128, 16);
        }
        let mut times = Vec::new();

        for s in 0..steps {
            // Contexts 128..160 throughout (the bench's P=128 decode), for profiling.
            let s = s % 32;
            if s == 0 {
                for t in tables.iter_mut() {
                    t.truncate_blocks(&mut pool, 8);
                    t.commit(128, 16);
                }
            }
            let pos = 128 + s;
            for t in tables.iter_mut() {
                t.reserve(&mut pool, pos + 1)?;
            }
            let tok = [500u32 + s as u32];
            let chunks: Vec<SeqChunk> = tables
                .iter()
                .map(|t| SeqChunk {
                    tokens: &tok,
                    start_pos: pos,
                    prompt_end: 128,
                    table: t,
                    logits_from: Some(0),
                    observe: None,
                    mask: None,
                })
                .collect();
            let t0 = Instant::now();
            model.decoder.forward_batch(&mut pool, &chunks)?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
            for t in tables.iter_mut() {
                t.commit(pos + 1, 16);
            }
        }
        times.sort_by(|a, c| a.total_cmp(c));
        let med = times[times.len() / 2];
        println!(
            "B={b:2}: step median {med:.2} ms, {:.1} tokens/s aggregate",
            b as f64 / med * 1e3
        );
    }
    Ok(())
}
