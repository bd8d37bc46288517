//! The portable kernels (what a CPU without AVX2 runs), forced with
//! `NANOLLM_PORTABLE_KERNELS`, through the same oracles as the SIMD ones: quantized logits
//! against candle-transformers' `quantized_llama` (same top-1 token, cosine > 0.9995,
//! max |Δlogit| < 1.0) and naive == KV-cached greedy decoding, token for token; and the
//! SIMD run's own teacher-forced logits (mean KLD < 1e-6; two child processes, as the
//! switch is read once per process), on the default model and on a Q4_K_M-like requantized
//! copy of it (the K-quant kernels).
mod common;
use nanollm::engine::{self, CacheConfig, DecodeMode, Request, SamplingParams};
use std::sync::atomic::AtomicBool;

#[test]
fn portable_kernels_pass_the_oracles() {
    // The one test here that runs kernels in this process (the others only spawn or
    // return): the switch is read once, before any kernel runs.
    std::env::set_var("NANOLLM_PORTABLE_KERNELS", "1");
    assert!(nanollm::cpu::portable_forced());

    // Quantized logits against candle's model from the same GGUF.
    let (d, cos, same_top) =
        common::quantized_logits_vs_candle(common::quantized_model(), nanollm::kv::KvDtype::F16);
    eprintln!("portable kernels: max |Δlogit| = {d}, cosine = {cos}");
    assert!(same_top, "the top-1 tokens differ");
    assert!(cos > 0.9995, "cosine {cos}");
    assert!(d < 1.0, "max |Δlogit| {d}");

    // Naive and KV-cached greedy decoding agree on the portable kernels too (dense prefill,
    // f16 KV cache read back by the portable attention).
    let m = common::model();
    let tokens = |mode| {
        let req = Request {
            prompt_ids: m
                .tokenizer
                .encode("Once upon a time, in a small village")
                .expect("encode"),
            max_new_tokens: 16,
            sampling: SamplingParams::greedy(),
            mode,
            cache: CacheConfig::default(),
            stop_token_ids: Vec::new(),
            stop_strings: Vec::new(),
            ignore_eos: true,
            speculative: Default::default(),
        };
        let stop = AtomicBool::new(false);
        engine::generate(&m.decoder, &m.tokenizer, &req, &stop, |_| Ok(()))
            .expect("generate")
            .tokens
    };
    let kv = tokens(DecodeMode::KvCache);
    assert_eq!(kv.len(), 16);
    assert_eq!(kv, tokens(DecodeMode::Naive));

    // The machine limits measure (and name) the loops of the kernels that ran: portable.
    let limits = nanollm::roofline::measure_with(nanollm::roofline::MeasureOptions {
        trial_ms: 2.0,
        trials: 1,
        buffer_bytes: 1 << 20,
    });
    assert_eq!(limits.kernel, "portable");
    assert_eq!(limits.int8_kernel, "portable");
}

/// Where [`teacher_forced_logits_child`] writes its logits (set only by the parent test).
const LOGITS_OUT: &str = "NANOLLM_TEST_LOGITS_OUT";

/// The GGUF [`teacher_forced_logits_child`] runs, when not the default model.
const MODEL_IN: &str = "NANOLLM_TEST_LOGITS_MODEL";

/// In a child process of [`portable_logits_equal_the_simd_ones`] (nothing otherwise): the
/// default model's teacher-forced logits under this process's kernels, written as f32 to
/// `$NANOLLM_TEST_LOGITS_OUT`: a quantized prefill of 280 tokens in two chunks (200 + 80,
/// past the attention's first 256-key range), then 8 decode steps, one row of logits each.
#[test]
fn teacher_forced_logits_child() {
    let Some(out) = std::env::var_os(LOGITS_OUT) else {
        return;
    };
    use nanollm::kv::{KvCache, KvDtype};
    use nanollm::model::decoder::logits_vec;
    let other = std::env::var_os(MODEL_IN).map(|path| {
        nanollm::model::source::load(path.as_ref(), &candle_core::Device::Cpu, false)
            .expect("load model")
    });
    let m = other.as_ref().unwrap_or_else(|| common::quantized_model());
    let text = "It is a truth universally acknowledged, that a single man in possession of a \
                good fortune, must be in want of a wife. However little known the feelings or \
                views of such a man may be on his first entering a neighbourhood, this truth is \
                so well fixed in the minds of the surrounding families. ";
    let mut ids = Vec::new();
    while ids.len() < 288 {
        ids.extend(m.tokenizer.encode(text).expect("encode"));
    }
    let mut cache = KvCache::new(m.config().kv_shape(KvDtype::F16), 16, 4096).expect("cache");
    let mut rows = Vec::new();
    let mut step = |tokens: &[u32], pos: usize| {
        let t = m.decoder.forward(tokens, pos, &mut cache).expect("forward");
        rows.extend(logits_vec(&t).expect("logits"));
    };
    step(&ids[..200], 0);
    step(&ids[200..280], 200);
    for p in 280..288 {
        step(&ids[p..p + 1], p);
    }
    let bytes: Vec<u8> = rows.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(out, bytes).expect("write logits");
}

/// The portable kernels give the SIMD kernels' logits (issue 56): the same teacher-forced
/// run ([`teacher_forced_logits_child`]) in two processes, with and without
/// `NANOLLM_PORTABLE_KERNELS`, mean KL divergence < 1e-6 over quantized prefill and decode.
#[test]
fn portable_logits_equal_the_simd_ones() {
    common::model_path();
    portable_logits_equal_the_simd_ones_on(None);
}

/// As [`portable_logits_equal_the_simd_ones`] on a Q4_K_M-like copy of the default model:
/// `ffn_down` (the only matrices whose 1,536-wide rows are whole 256-weight blocks) in Q6_K
/// on even layers and Q4_K on odd ones, the other Q4_1 matrices in Q8_0 (llama-quantize's
/// fallback), requantized with candle's ggml quantizers.
#[test]
fn portable_logits_equal_the_simd_ones_on_q4_k_m() {
    use candle_core::quantized::{GgmlDType, QTensor};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("q4_k_m.gguf");
    let k_quants = [std::cell::Cell::new(0), std::cell::Cell::new(0)];
    let edit = |name: &str, t: QTensor| {
        if t.dtype() != GgmlDType::Q4_1 {
            return t;
        }
        let w = t.dequantize(&candle_core::Device::Cpu).expect("dequantize");
        let layer: usize = name
            .split('.')
            .nth(1)
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let dtype = match (name.contains("ffn_down"), layer % 2) {
            (true, 0) => GgmlDType::Q6K,
            (true, _) => GgmlDType::Q4K,
            (false, _) => GgmlDType::Q8_0,
        };
        if let Some(n) = [GgmlDType::Q6K, GgmlDType::Q4K]
            .iter()
            .position(|&k| k == dtype)
        {
            k_quants[n].set(k_quants[n].get() + 1);
        }
        QTensor::quantize(&w, dtype).expect("quantize")
    };
    common::rewrite(&path, edit, Vec::new());
    let counts = k_quants.map(|c| c.get());
    assert!(
        counts.iter().all(|&n| n > 0),
        "Q6_K, Q4_K matrices: {counts:?}"
    );
    portable_logits_equal_the_simd_ones_on(Some(&path));
}

/// The body of the two tests above: the default model, or the GGUF at `model`.
fn portable_logits_equal_the_simd_ones_on(model: Option<&std::path::Path>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |portable: bool| {
        let path = dir.path().join(if portable { "portable" } else { "simd" });
        let mut cmd = std::process::Command::new(std::env::current_exe().expect("exe"));
        cmd.args(["--exact", "teacher_forced_logits_child", "--test-threads=1"])
            .env(LOGITS_OUT, &path)
            .env_remove(MODEL_IN)
            .env_remove("NANOLLM_PORTABLE_KERNELS");
        if let Some(model) = model {
            cmd.env(MODEL_IN, model);
        }
        if portable {
            cmd.env("NANOLLM_PORTABLE_KERNELS", "1");
        }
        let out = cmd.output().expect("run child");
        assert!(
            out.status.success(),
            "child: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&path).expect("logits written");
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect::<Vec<f32>>()
    };
    let (simd, portable) = (run(false), run(true));
    assert_eq!(simd.len(), portable.len());
    let rows = 10;
    assert!(!simd.is_empty() && simd.len().is_multiple_of(rows));
    let vocab = simd.len() / rows;
    let log_softmax = |l: &[f32]| {
        let max = l
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, |a, x| a.max(x as f64));
        let lse = l.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln() + max;
        l.iter().map(|&x| x as f64 - lse).collect::<Vec<f64>>()
    };
    let mut total = 0f64;
    for (a, b) in simd.chunks_exact(vocab).zip(portable.chunks_exact(vocab)) {
        let (p, q) = (log_softmax(a), log_softmax(b));
        total += p
            .iter()
            .zip(&q)
            .map(|(x, y)| x.exp() * (x - y))
            .sum::<f64>();
    }
    let mean = total / rows as f64;
    let differing = simd
        .iter()
        .zip(&portable)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    eprintln!("portable vs SIMD: mean KLD {mean:e}, {differing} logits differ in their bits");
    assert!(mean < 1e-6, "mean KLD {mean:e}");
}
