//! `--quantize`: the default model written as a Hugging Face folder (f32), quantized at load.
//! - q8_0: every matrix on our kernels, each weight what candle's Q8_0 quantizer (ggml's
//!   reference, `quantize_row_q8_0_ref`) gives, no f32 copy, the tied embedding held once;
//!   the answer to a chat question as the f32 folder's, naive == KV-cached decoding.
//! - q4_k: `ffn_down` (rows of 1,536) in Q4_K, the 576-wide rows in Q5_0 (llama-quantize's
//!   fallback), the tied embedding in Q8_0 (llama-quantize's rule for the output matrix),
//!   said in one warning line; our Q4_K bytes equal libggml's (tests/quantize_q4_k.rs).
//! - a GGUF with `--quantize`, and a type it does not produce, are refused in one line.
use crate::common;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use nanollm::engine::DecodeMode;
use nanollm::model::quantize_at_load::InSitu;
use nanollm::model::source::{self, LoadOptions};
use nanollm::model::Loaded;
use std::path::Path;

fn load(dir: &Path, t: InSitu) -> Loaded {
    let opts = LoadOptions {
        dense_prefill: false,
        dtype: None,
        quantize: Some(t),
    };
    source::load_with(dir, &Device::Cpu, opts).expect("load")
}

#[test]
fn q8_0_in_situ_holds_candle_s_blocks_once_and_answers_alike() {
    let dir = tempfile::tempdir().expect("tempdir");
    crate::gguf_write::gguf_to_hf_folder(&common::model_path(), dir.path());
    let m = load(dir.path(), InSitu::Q8_0);
    let f32_model = crate::ours::load(dir.path(), None);
    let w = m.decoder.weights();
    let reference = f32_model.decoder.weights();
    for (i, (l, r)) in w.layers.iter().zip(&reference.layers).enumerate() {
        for (name, lin, f) in [
            (
                "q_proj",
                &l.attention.gqa().expect("GQA").q_proj,
                &r.attention.gqa().expect("GQA").q_proj,
            ),
            (
                "down_proj",
                &l.ffn.dense().expect("dense FFN").down_proj,
                &r.ffn.dense().expect("dense FFN").down_proj,
            ),
        ] {
            let q = lin
                .quant
                .as_ref()
                .unwrap_or_else(|| panic!("layer {i} {name}: not quantized"));
            assert!(
                lin.weight.is_none() && lin.dense.is_none(),
                "layer {i} {name}: a second copy"
            );
            let dense = f.dense.as_ref().expect("f32 weight");
            let want: Vec<f32> = QTensor::quantize(dense, GgmlDType::Q8_0)
                .and_then(|t| t.dequantize(&Device::Cpu))
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .expect("candle's q8_0");
            assert!(
                q.dequantize() == want,
                "layer {i} {name}: not candle's Q8_0 weights"
            );
        }
    }
    let held = m.decoder.weights_held();
    assert_eq!(
        (
            held.f32_prefill_copy,
            held.candle_matrices,
            held.embedding_f32
        ),
        (0, 0, 0)
    );
    // 30 layers of 3,538,944 weights in Q8_0 (34 bytes per 32: 3,760,128 bytes) and the
    // tied 49,152 × 576 head, once (30,081,024 bytes).
    assert_eq!(held.quantized_blocks, 30 * 3_760_128 + 30_081_024);
    // The roofline counts the blocks held, not the folder's f32 bytes (found by a new-user
    // trial: it counted 538.9 MB).
    let counted = nanollm::roofline::weights::loaded_model_weights(
        dir.path(),
        m.config(),
        m.decoder.weights(),
        false,
    )
    .expect("counts");
    assert_eq!(counted.decode.total(), held.quantized_blocks);
    assert_eq!(counted.prefill, counted.decode);
    let prompt = m
        .tokenizer
        .encode("The capital of Germany is")
        .expect("encode");
    let a = crate::ours::engine_greedy(&m, &prompt, 12, DecodeMode::KvCache).tokens;
    let b = crate::ours::engine_greedy(&m, &prompt, 12, DecodeMode::Naive).tokens;
    assert_eq!(a, b, "naive and kv-cache");
    let f = crate::ours::engine_greedy(&f32_model, &prompt, 12, DecodeMode::KvCache).tokens;
    assert_eq!(a[..4], f[..4], "q8_0 against the f32 folder");
}

#[test]
fn q4_k_in_situ_takes_q5_0_where_rows_are_not_whole_super_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    crate::gguf_write::gguf_to_hf_folder(&common::model_path(), dir.path());
    let m = load(dir.path(), InSitu::Q4K);
    let w = m.decoder.weights();
    let down = w.layers[0]
        .ffn
        .dense()
        .expect("dense FFN")
        .down_proj
        .quant
        .as_ref()
        .expect("down_proj");
    // Q4_K in its own layout: 148 bytes per row of 256 weights, 576 rows of 1,536.
    assert_eq!(down.bytes(), 576 * 6 * 148);
    let q = w.layers[0]
        .attention
        .gqa()
        .expect("GQA")
        .q_proj
        .quant
        .as_ref()
        .expect("q_proj");
    // Q5_0, held in the 5-bit layout (24 bytes per 32 weights): 576 rows of 18 blocks.
    assert_eq!(q.bytes(), 576 * 18 * 24);
    let out = common::nanollm()
        .args([
            "generate",
            "-n",
            "4",
            "--no-chat",
            "--quantize",
            "q4_k",
            "-m",
        ])
        .arg(dir.path())
        .arg("Hello")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("--quantize q4_k: 181 of 211 weight matrices are not Q4_K, their rows not being whole blocks of it (the type each took in brackets): model.embed_tokens.weight (Q8_0), "),
        "{stderr}"
    );
}

/// `--quantize q4_k` quantizes the output matrix by llama-quantize's rule for
/// `output.weight` (a tied embedding included): Q6_K, or Q8_0 where its rows are not whole
/// blocks of 256 — the default model's 576-wide tied embedding took Q5_0 before.
#[test]
fn q4_k_in_situ_keeps_the_tied_embedding_at_q8_0_or_q6_k() {
    use nanollm::model::quantize_at_load::{output_target, quantize};
    assert_eq!(output_target(InSitu::Q4K, 576), Some(GgmlDType::Q8_0));
    assert_eq!(output_target(InSitu::Q4K, 2048), Some(GgmlDType::Q6K));
    assert_eq!(output_target(InSitu::Q4_0, 2048), Some(GgmlDType::Q4_0));
    // Q6_K's blocks are candle's (ggml's reference quantizer), held in our layout.
    let w = candle_core::Tensor::randn(0f32, 1.0, (16, 512), &Device::Cpu).expect("randn");
    let want: Vec<f32> = QTensor::quantize(&w, GgmlDType::Q6K)
        .and_then(|t| t.dequantize(&Device::Cpu))
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1())
        .expect("candle's q6_k");
    assert!(quantize(&w, GgmlDType::Q6K).expect("q6_k").dequantize() == want);
    let dir = tempfile::tempdir().expect("tempdir");
    crate::gguf_write::gguf_to_hf_folder(&common::model_path(), dir.path());
    let m = load(dir.path(), InSitu::Q4K);
    let head = m.decoder.weights().lm_head.quant.as_ref().expect("lm_head");
    // The tied 49,152 × 576 head in Q8_0 (34 bytes per 32), not Q5_0 (24 per 32 held).
    assert_eq!(
        head.bytes(),
        30_081_024,
        "49,152 × 576 at {} bytes",
        head.bytes()
    );
    let prompt = m
        .tokenizer
        .encode("The capital of Germany is")
        .expect("encode");
    let a = crate::ours::engine_greedy(&m, &prompt, 6, DecodeMode::KvCache).tokens;
    assert_eq!(a.len(), 6);
}

/// The fallback warning names every matrix that took another type (it named the first
/// only), a layer range for names that differ in their layer number.
#[test]
fn the_fallback_warning_names_every_matrix() {
    use nanollm::model::quantize_at_load::name_all;
    let list: Vec<String> = [
        "a.weight (Q8_0)",
        "l.0.q (Q5_0)",
        "l.0.k (Q5_0)",
        "l.1.q (Q5_0)",
    ]
    .iter()
    .chain(&["l.2.q (Q5_0)", "l.5.q (Q5_0)", "l.3.k (F32)"])
    .map(|s| s.to_string())
    .collect();
    assert_eq!(
        name_all(&list),
        "a.weight (Q8_0), l.{0-2,5}.q (Q5_0), l.0.k (Q5_0), l.3.k (F32)"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    crate::gguf_write::gguf_to_hf_folder(&common::model_path(), dir.path());
    let out = common::nanollm()
        .args([
            "generate",
            "-n",
            "1",
            "--no-chat",
            "--quantize",
            "q4_k",
            "-m",
        ])
        .arg(dir.path())
        .arg("Hello")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("warning: "))
        .expect("a warning");
    // 181 = the tied embedding and six matrices of each of the 30 layers (not ffn_down).
    let names = [
        "model.embed_tokens.weight (Q8_0)",
        "model.layers.{0-29}.self_attn.q_proj.weight (Q5_0)",
        "model.layers.{0-29}.self_attn.k_proj.weight (Q5_0)",
        "model.layers.{0-29}.self_attn.v_proj.weight (Q5_0)",
        "model.layers.{0-29}.self_attn.o_proj.weight (Q5_0)",
        "model.layers.{0-29}.mlp.gate_proj.weight (Q5_0)",
        "model.layers.{0-29}.mlp.up_proj.weight (Q5_0)",
    ];
    for n in names {
        assert!(warning.contains(n), "{n} not in: {warning}");
    }
    assert!(!warning.contains("down_proj"), "{warning}");
}

/// `--prefill-kernel dense` with `--quantize` keeps the f32 weights for prompt rows (found by
/// a bug hunt: it was silently ignored), counted in the weights held.
#[test]
fn quantize_with_dense_prefill_keeps_the_f32_weights_for_prompt_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    crate::gguf_write::gguf_to_hf_folder(&common::model_path(), dir.path());
    let opts = LoadOptions {
        dense_prefill: true,
        dtype: None,
        quantize: Some(InSitu::Q8_0),
    };
    let m = source::load_with(dir.path(), &Device::Cpu, opts).expect("load");
    let l = &m.decoder.weights().layers[0]
        .attention
        .gqa()
        .expect("GQA")
        .q_proj;
    assert!(l.quant.is_some() && l.dense.is_some() && l.weight.is_none());
    let held = m.decoder.weights_held();
    // Every matrix's f32 weights (the tied 49,152 × 576 head's among them), 4 bytes each.
    assert_eq!(held.f32_prefill_copy, 4 * (30 * 3_538_944 + 49_152 * 576));
    assert_eq!(held.quantized_blocks, 30 * 3_760_128 + 30_081_024);
}

#[test]
fn quantize_is_refused_for_a_gguf_and_for_types_it_does_not_make() {
    common::fails_with(
        &["generate", "-n", "1", "--quantize", "q8_0", "Hi"],
        "is a GGUF file, quantized already",
    );
    common::fails_with(
        &["generate", "-n", "1", "--quantize", "q3_k", "Hi"],
        "\"q3_k\" is not a type --quantize produces (q8_0, q4_0 or q4_k)",
    );
}
