//! The roofline on the real default model (SmolLM2-135M-Instruct Q4_1): the weight bytes a
//! decode step reads, from the GGUF header, against hand-computed values and against the
//! packed matrices our kernels hold; `generate`'s roofline figures against the formulas;
//! `bench --machine` end to end.
mod common;
use candle_core::quantized::GgmlDType;
use candle_core::Device;
use common::nanollm;
use nanollm::kernels::matmul::QuantMatrix;
use nanollm::model::gguf::GgufFile;
use nanollm::roofline::weights::gguf_weight_bytes;
use nanollm::roofline::{model_weights, WeightBytes};
use serde_json::Value;

/// Every layer matrix of the default model is Q4_1 (20 bytes per 32 weights):
/// 30 · 3,538,944 weights · 20 / 32 = 66,355,200 bytes; the tied LM head is the Q8_0 token
/// embedding (34 bytes per 32): 49,152 · 576 · 34 / 32 = 30,081,024 bytes.
const DECODE_WEIGHTS: WeightBytes = WeightBytes {
    layers: 66_355_200,
    lm_head: 30_081_024,
};

#[test]
fn default_model_weight_bytes_by_hand() {
    let path = common::model_path();
    let config = common::quantized_model().config().clone();
    let gguf = GgufFile::open(&path).expect("open the GGUF");
    assert_eq!(
        gguf_weight_bytes(&gguf.content, &gguf.foreign, &config).expect("count"),
        DECODE_WEIGHTS
    );
    let dense = model_weights(&path, &config, true).expect("weights");
    assert_eq!(dense.decode, DECODE_WEIGHTS);
    // Dense prefill reads the f32 copy: 4 · 106,168,320 and 4 · 28,311,552 bytes.
    assert_eq!(
        dense.prefill,
        WeightBytes {
            layers: 424_673_280,
            lm_head: 113_246_208
        }
    );
    assert!(dense.separate_prefill_copy);
    let quantized = model_weights(&path, &config, false).expect("weights");
    assert_eq!(quantized.prefill, DECODE_WEIGHTS);
    assert!(!quantized.separate_prefill_copy);
}

#[test]
fn the_header_count_equals_the_bytes_of_the_packed_matrices() {
    let path = common::model_path();
    let config = common::quantized_model().config().clone();
    let mut gguf = GgufFile::open(&path).expect("open the GGUF");
    let mut bytes = |name: &str| -> u64 {
        let q = gguf.qtensor(name, &Device::Cpu).expect("tensor");
        let (rows, cols) = q.shape().dims2().expect("matrix");
        let data = q.data().expect("bytes");
        let m = match q.dtype() {
            GgmlDType::Q4_1 => QuantMatrix::from_ggml_bytes(&data, rows, cols),
            GgmlDType::Q8_0 => QuantMatrix::from_ggml_q8_0_bytes(&data, rows, cols),
            t => panic!("{name}: unexpected type {t:?}"),
        };
        m.expect("pack").bytes()
    };
    let mut layers = 0;
    for i in 0..config.num_hidden_layers {
        for m in [
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        ] {
            layers += bytes(&format!("blk.{i}.{m}.weight"));
        }
    }
    let lm_head = bytes("token_embd.weight");
    assert_eq!(WeightBytes { layers, lm_head }, DECODE_WEIGHTS);
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Prefill FLOPs of the default model for an n-token prompt, by hand:
/// 2 · n · 106,168,320 (linear) + 4 · 30 · 9 · 64 · n (n + 1) / 2 (attention)
/// + 2 · 49,152 · 576 (LM head, last row).
fn prefill_flops(n: u64) -> f64 {
    (2 * n * 106_168_320 + 69_120 * n * (n + 1) / 2 + 56_623_104) as f64
}

#[test]
fn generate_json_has_the_roofline_figures_of_its_run() {
    common::model_path();
    let stdout = common::run_ok(&[
        "generate",
        "--json",
        "--no-chat",
        "-n",
        "5",
        "The KV cache is",
    ]);
    let doc: Value = serde_json::from_slice(&stdout).expect("JSON");
    let r = &doc["roofline"];
    let p = doc["stats"]["prompt_tokens"].as_u64().expect("prompt");
    let g = doc["stats"]["generated_tokens"]
        .as_u64()
        .expect("generated");
    assert_eq!(f(&r["prefill"]["flops"]), prefill_flops(p));
    // Dense prefill: 537,919,488 bytes of f32 weights (4 · 134,479,872) + p · 23,040 bytes
    // of f16 K/V. Where the dense product reads the GGUF blocks for up to 8 rows (AVX-512F or AVX2),
    // a prompt that short reads the 96,436,224 block bytes, a longer one the f32 layers
    // (424,673,280) and the Q8_0 LM head's blocks (30,081,024).
    let weights: u64 = match (nanollm::kernels::matmul::dense_from_blocks(), p <= 8) {
        (false, _) => 537_919_488,
        (true, true) => 96_436_224,
        (true, false) => 424_673_280 + 30_081_024,
    };
    assert_eq!(f(&r["prefill"]["bytes"]), (weights + p * 23_040) as f64);
    // Counts are JSON integers (bytes are exact), decode's means rounded.
    for phase in ["prefill", "decode"] {
        for key in ["bytes", "flops"] {
            assert!(r[phase][key].is_u64(), "{phase}.{key}: {}", r[phase][key]);
        }
    }
    let ms = f(&doc["stats"]["prefill_ms"]);
    assert!((f(&r["prefill"]["gflop_s"]) - prefill_flops(p) / ms / 1e6).abs() < 1e-6);
    assert!(r["limits"].is_null(), "no --roofline: not measured");
    assert!(r["prefill"]["pct_of_f32_peak"].is_null());
    if g >= 2 {
        // Per token: 96,436,224 weight bytes + (p + g / 2) keys · 23,040 bytes.
        let keys = p as f64 + g as f64 / 2.0;
        let d = &r["decode"];
        assert_eq!(f(&d["bytes"]), 96_436_224.0 + keys * 23_040.0);
        let tpot = f(&doc["stats"]["tpot_ms"]);
        assert!((f(&d["gb_s"]) - f(&d["bytes"]) / tpot / 1e6).abs() < 1e-6);
    }
    assert_eq!(r["weights"]["decode"]["layers"], 66_355_200);
}

#[test]
fn roofline_measures_the_machine_and_shows_the_binding_roof() {
    common::model_path();
    let out = nanollm()
        .args([
            "generate",
            "--roofline",
            "--no-chat",
            "-n",
            "4",
            "Once upon a time",
        ])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = |key: &str| {
        stderr
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key:?} line in\n{stderr}"))
            .to_string()
    };
    assert!(line("roofline prefill").contains("GFLOP/s ("), "{stderr}");
    assert!(line("roofline prefill").contains("FLOP/byte: "), "{stderr}");
    // KV-cached decode (2.8 FLOP/byte) is memory-bound on any machine whose ridge is above
    // that; the verdict itself depends on the measured limits, so only its form is checked.
    assert!(line("roofline decode").contains("% of the"), "{stderr}");
    assert!(line("roofline decode").ends_with("-bound"), "{stderr}");
    assert!(line("machine limits").contains("f32 FMA"), "{stderr}");
    // The read over a buffer of the decode weights' size (96,436,224 bytes), beside the
    // memory figure, and the decode line's share of it.
    assert!(
        line("machine limits").contains(" over 96.44 MB, the decode weights' size); ridge"),
        "{stderr}"
    );
    assert!(
        line("roofline decode").contains("GB/s read over 96.44 MB, the decode weights' size)"),
        "{stderr}"
    );
    // --show-stats alone counts the work but does not measure the machine.
    let out = nanollm()
        .args(["generate", "--show-stats", "--no-chat", "-n", "2", "Once"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not measured: add --roofline"), "{stderr}");
    assert!(!stderr.contains("% of the"), "{stderr}");
}

/// On one thread (found by a bug hunt): "on 1 threads", and two trials of the same loop
/// printed as different "1 thread" and "one core" rates.
#[test]
fn bench_machine_on_one_thread_says_one_thread_once() {
    let out = nanollm()
        .args(["bench", "--machine", "--threads", "1", "--json", "-"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("1 threads"), "{stderr}");
    assert!(stderr.contains("GFLOP/s on 1 thread, "), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let l = &doc["limits"];
    for (all, one) in [
        ("f32_gflop_s", "f32_gflop_s_per_core"),
        ("int8_gop_s", "int8_gop_s_per_core"),
        ("read_gb_s", "read_gb_s_per_core"),
    ] {
        assert_eq!(l[all], l[one], "{l}");
    }
    // No second thread to pass a cache line to.
    assert_eq!(l["core_to_core_round_trip_ns"], Value::Null, "{l}");
    assert!(
        stderr.contains("core-to-core    not measured: it needs 2 threads or more"),
        "{stderr}"
    );
}

#[test]
fn bench_machine_prints_and_writes_positive_limits() {
    let out = nanollm()
        .args(["bench", "--machine", "--threads", "2", "--json", "-"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let l = &doc["limits"];
    for key in [
        "f32_gflop_s",
        "f32_gflop_s_per_core",
        "int8_gop_s",
        "int8_gop_s_per_core",
        "read_gb_s",
        "read_gb_s_per_core",
        "ridge_flop_per_byte",
    ] {
        assert!(
            l[key].as_f64().is_some_and(|v| v.is_finite() && v > 0.0),
            "{key}: {l}"
        );
    }
    assert_eq!(l["threads"], 2);
    assert_eq!(l["buffer_bytes"], 512u64 << 20);
    // No model: no decode working set to measure, and the progress line does not claim one.
    assert_eq!(l["working_set"], Value::Null, "{l}");
    assert!(!stderr.contains("decode weights"), "{stderr}");
    assert_eq!(doc["machine"]["threads"], 2);
    // The text goes to stderr when stdout carries the JSON.
    for needle in [
        "f32 FMA peak",
        "int8 dot roof",
        "read bandwidth",
        "ridge point",
        "core-to-core",
    ] {
        assert!(stderr.contains(needle), "{needle:?} missing from\n{stderr}");
    }
    // The core-to-core round trip on 2 threads (None only when another process held a CPU
    // through all 9 trials, so that no batch of 64 round trips ran: then the row says so).
    match l["core_to_core_round_trip_ns"].as_f64() {
        Some(ns) => assert!(ns.is_finite() && ns > 10.0, "{ns} ns"),
        None => assert!(
            stderr.contains("never ran at once") || stderr.contains("share the one CPU"),
            "{stderr}"
        ),
    }
    // --machine draws nothing: --plot is a usage error.
    let out = nanollm()
        .args(["bench", "--machine", "--plot", "x.svg"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}
