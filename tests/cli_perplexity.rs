//! `nanollm perplexity` end to end on the default model: a saved f32 base, the same run
//! compared against itself (KLD exactly 0), q8_0 and 4-bit KV caches compared against it,
//! refusals.
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
    assert!(f32_run["duration_s"].as_f64().is_some_and(|s| s > 0.0));
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

    // The 4-bit caches: further from f32 than q8_0, still the same model (a cache read back
    // wrong gives a KLD of several nats).
    for dtype in ["q4_0", "iq4_nl", "q4_0r", "iq4_nlr"] {
        let q4 = run_json(&[
            "--kv-cache-dtype",
            dtype,
            "--kl-divergence-base",
            base_s,
            "--kl-divergence",
        ]);
        let k = &q4["kl_divergence"];
        let m4 = k["mean_kld"].as_f64().expect("mean_kld");
        assert!(m4 > mean && m4 < 0.3, "{dtype}: mean KLD {m4}");
        assert!(k["same_top_p_pct"].as_f64() > Some(60.0), "{dtype}");
    }

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

    // Damaged bases: each refused with one line naming what is wrong, before any progress
    // ("[1]…"; the NaN is in the first chunk's rows).
    let bytes = std::fs::read(&base).expect("read base");
    let header_end = bytes
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .nth(1)
        .map(|(i, _)| i + 1)
        .expect("two header lines");
    let header = String::from_utf8_lossy(&bytes[..header_end]).to_string();
    let mut nan = bytes.clone();
    nan[header_end..header_end + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let mut other_vocab = header
        .replace("\"vocab\":49152", "\"vocab\":32000")
        .into_bytes();
    other_vocab.extend_from_slice(&bytes[header_end..]);
    for (name, contents, needle, before_run) in [
        (
            "truncated.kld",
            bytes[..bytes.len() - 8].to_vec(),
            "truncated",
            true,
        ),
        (
            "vocab.kld",
            other_vocab,
            "a vocabulary of 32000 tokens",
            true,
        ),
        ("nan.kld", nan, "not a log-probability", true),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, contents).expect("write");
        let out = Command::cargo_bin("nanollm")
            .expect("binary")
            .args([
                "perplexity",
                "--ctx-size",
                "64",
                "--chunks",
                "3",
                "--kv-cache-dtype",
                "f32",
            ])
            .args(["--kl-divergence", "--kl-divergence-base"])
            .arg(&path)
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: {stderr}");
        assert!(stderr.contains(needle), "{name}: {stderr}");
        assert_eq!(!stderr.contains("[1]"), before_run, "{name}: {stderr}");
    }
}

/// The text is data, as llama-perplexity reads it: control-token text such as
/// `<|im_start|>` in the file is tokenized as plain text (`parse_special` off), so the
/// token count is `tokenize --no-parse-special`'s (with the model's BOS), not the count
/// with those strings as single control tokens (llama-perplexity: 770 tokens, 6 chunks of
/// 128 on this text; we had 440 and 3).
#[test]
fn control_token_text_in_the_file_is_plain_text() {
    common::model_path();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("special.txt");
    let text: String = (0..30)
        .map(|i| format!("Line {i} says hello <|im_start|>user<|im_end|> to the world.\n"))
        .collect();
    std::fs::write(&file, &text).expect("write");
    let doc = run_json(&["-f", file.to_str().unwrap_or_default()]);
    let count = |extra: &[&str]| -> u64 {
        let mut args = vec!["tokenize", "--ids"];
        args.extend_from_slice(extra);
        args.push(&text);
        let out = common::run_ok(&args);
        let ids: Vec<u64> = serde_json::from_slice(&out).expect("ids as a JSON list");
        ids.len() as u64
    };
    let plain = count(&["--no-parse-special"]);
    assert_eq!(doc["text_tokens"].as_u64(), Some(plain));
    assert!(plain > count(&[]), "the control-token text was not split");
}

/// A bad --ctx-size or --chunks is one line naming that flag, not the text file (a bug hunt
/// found `--file small.txt: --ctx-size 0: …`); a text too short for one chunk names the file.
#[test]
fn flag_errors_name_the_flag_and_a_short_text_names_the_file() {
    common::model_path();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("small.txt");
    std::fs::write(&file, "hello world\n").expect("write");
    let f = file.to_string_lossy().to_string();
    for (args, want) in [
        (
            vec!["-c", "0"],
            "error: --ctx-size 0: expected at least 4 tokens".to_string(),
        ),
        (
            vec!["--chunks", "0"],
            "error: --chunks 0: expected at least 1".to_string(),
        ),
        (
            vec!["-c", "100000"],
            "error: --ctx-size 100000: larger than the model's context window".to_string(),
        ),
        (vec!["-c", "8"], format!("error: --file {f}: the text has ")),
    ] {
        let out = Command::cargo_bin("nanollm")
            .expect("binary")
            .args(["perplexity", "-f", &f])
            .args(&args)
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with(&want), "{args:?}: {stderr}");
    }
}
