//! The portable kernels (what a CPU without AVX2 runs), forced with
//! `NANOLLM_PORTABLE_KERNELS`, through the same oracles as the SIMD ones: quantized logits
//! against candle-transformers' `quantized_llama` (same top-1 token, cosine > 0.9995,
//! max |Δlogit| < 1.0) and naive == KV-cached greedy decoding, token for token.
mod common;
use nanollm::engine::{self, CacheConfig, DecodeMode, Request, SamplingParams};
use std::sync::atomic::AtomicBool;

#[test]
fn portable_kernels_pass_the_oracles() {
    // One test in this binary: the switch is read once, before any kernel runs.
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
