//! `nanollm perplexity` end to end on the default model: a saved f32 base, the same run
//! compared against itself (KLD exactly 0), a q8_0 KV cache compared against it, refusals.
mod common;
use assert_cmd::Command;
use serde_json::Value;

fn run_json(args: &[&str]) -> Value {
    let out = Command::cargo_bin("nanollm")
        .expect("binary")
        .arg("perplexity")
        .args(["--ctx-size", "64", "--chunks", "3", "--json"])
        .args(args)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    serde_json::from_slice(&out.stdout).expect("one JSON document on stdout")
}

#[test]
fn kv_dtype_accuracy_against_an_f32_base() {
    common::model_path();
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().join("f32.kld");
    let base_s = base.to_str().unwrap_or_default();
    let f32_run = run_json(&["--kv-cache-dtype", "f32", "--kl-divergence-base", base_s]);
    // 3 chunks of 64 tokens, positions 32..=62 scored: 31 per chunk.
    assert_eq!(f32_run["scored_tokens"], 93);
    let ppl = f32_run["ppl"].as_f64().expect("ppl");
    assert!(ppl.is_finite() && ppl > 1.0, "{ppl}");
    // 31 scored positions × vocab log-probabilities as f32, after a two-line header.
    let vocab = 49_152u64;
    let len = std::fs::metadata(&base).expect("base written").len();
    assert!(len > 93 * vocab * 4 && len < 93 * vocab * 4 + 1024, "{len}");

    // The same run against its own base: identical distributions.
    let same = run_json(&[
        "--kv-cache-dtype",
        "f32",
        "--kl-divergence-base",
        base_s,
        "--kl-divergence",
    ]);
    let k = &same["kl_divergence"];
    assert_eq!(k["mean_kld"].as_f64(), Some(0.0));
    assert_eq!(k["same_top_p_pct"].as_f64(), Some(100.0));
    assert_eq!(same["ppl"], f32_run["ppl"]);

    // q8_0 K/V: close to f32 but not equal.
    let q8 = run_json(&[
        "--kv-cache-dtype",
        "q8_0",
        "--kl-divergence-base",
        base_s,
        "--kl-divergence",
    ]);
    let k = &q8["kl_divergence"];
    let mean = k["mean_kld"].as_f64().expect("mean_kld");
    assert!(mean > 0.0 && mean < 0.05, "mean KLD {mean}");
    assert!(k["max_kld"].as_f64() >= Some(mean));
    assert!(k["same_top_p_pct"].as_f64() > Some(80.0));
    assert!((k["ppl_base"].as_f64().unwrap_or(0.0) - ppl).abs() < 1e-3 * ppl);

    // A base made with other settings does not compare.
    let out = Command::cargo_bin("nanollm")
        .expect("binary")
        .args(["perplexity", "--ctx-size", "32", "--chunks", "3"])
        .args(["--kl-divergence-base", base_s, "--kl-divergence"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("do not compare"), "{stderr}");
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{stderr}"
    );
}
