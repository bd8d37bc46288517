//! The command line and the API: `generate --spec` (text == plain, the stats lines, `--json`),
//! refusals in one line, `bench --compare kv-cache,spec` and `--spec-synth-rates`, and
//! serve's per-request `speculative` field.
use crate::common;
use crate::{PASSAGE, PROMPTS};

fn copy_prompt() -> String {
    PROMPTS[0].replace("{P}", PASSAGE)
}

#[test]
fn generate_spec_prints_the_same_text_and_its_stats() {
    let p = copy_prompt();
    let plain = common::run_ok(&["generate", "-n", "48", &p]);
    let out = common::nanollm()
        .args([
            "generate",
            "-n",
            "48",
            "--spec",
            "ngram",
            "--show-stats",
            &p,
        ])
        .output()
        .expect("run");
    assert!(out.status.success());
    assert_eq!(out.stdout, plain, "stdout");
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "speculative           ngram (1..3), k 4, turn-down rule on",
        "spec acceptance",
        "spec by position",
        "spec verify cost      verify step",
    ] {
        assert!(err.contains(needle), "{needle:?} in {err}");
    }
    let doc: serde_json::Value = serde_json::from_slice(&common::run_ok(&[
        "generate",
        "-n",
        "48",
        "--json",
        "--spec",
        "ngram",
        "--spec-tokens",
        "6",
        "--spec-force",
        &p,
    ]))
    .expect("json");
    let spec = &doc["stats"]["spec"];
    assert_eq!(spec["k"], 6);
    assert_eq!(spec["forced"], true);
    assert!(
        spec["counts"]["num_accepted_tokens"].as_u64().expect("n") > 0,
        "{spec}"
    );
    assert!(doc["stats"]["spec"]["verify_step_ms"].as_f64().expect("ms") > 0.0);
}

#[test]
fn bad_spec_flags_are_one_line() {
    common::fails_with(
        &["generate", "--spec", "draft", "hi"],
        "--spec draft needs a draft model: add --draft-model FILE",
    );
    common::fails_with(
        &["generate", "--draft-model", "d.gguf", "hi"],
        "--draft-model d.gguf: speculative decoding is off; add --spec draft",
    );
    common::fails_with(
        &[
            "generate",
            "--spec",
            "ngram",
            "--draft-model",
            "d.gguf",
            "hi",
        ],
        "--draft-model d.gguf: only --spec draft uses a draft model",
    );
    common::fails_with(
        &[
            "generate",
            "--spec",
            "draft",
            "--draft-model",
            "d.gguf",
            "--spec-ngram-min",
            "2",
            "hi",
        ],
        "--spec-ngram-min 2: prompt lookup's setting",
    );
    common::fails_with(
        &[
            "generate",
            "--spec",
            "draft",
            "--draft-model",
            "/nonexistent.gguf",
            "hi",
        ],
        "--draft-model /nonexistent.gguf: no such file",
    );
    common::fails_with(
        &["generate", "--spec", "ngram", "--decode", "naive", "hi"],
        "does not combine with --decode naive",
    );
    common::fails_with(
        &["generate", "--spec-tokens", "3", "hi"],
        "--spec-tokens 3: speculative decoding is off",
    );
    common::fails_with(
        &["generate", "--spec-force", "hi"],
        "--spec-force: speculative decoding is off",
    );
    common::fails_with(
        &["generate", "--spec", "ngram", "--spec-tokens", "17", "hi"],
        "--spec-tokens 17: must be 1 to 16",
    );
    common::fails_with(
        &[
            "generate",
            "--spec",
            "ngram",
            "--spec-ngram-max",
            "18446744073709551615",
            "hi",
        ],
        "--spec-ngram-max 18446744073709551615: at most 64 tokens",
    );
    common::fails_with(
        &["bench", "--spec-synth-rates", "1", "--gen-len", "2"],
        "--gen-len 2: must be at least 3 tokens",
    );
    common::fails_with(
        &["bench", "--spec-synth-rates", "0.5,1.5"],
        "--spec-synth-rates 1.5: a rate is between 0 and 1",
    );
    common::fails_with(
        &["bench", "--spec-synth-rates", "0.5", "--spec-synth-k", "0"],
        "--spec-synth-k 0: a draft length is 1 to 16",
    );
}

#[test]
fn bench_compares_spec_with_kv_cache_and_sweeps_synthetic_rates() {
    let out = common::run_ok(&[
        "bench",
        "--compare",
        "kv-cache,spec",
        "--prompt-len",
        "32",
        "--gen-len",
        "16",
        "--runs",
        "1",
        "--warmup",
        "0",
        // The spec mode takes the --spec-* settings without --spec itself.
        "--spec-force",
        "--spec-tokens",
        "6",
    ]);
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("spec"), "{text}");
    let dir = tempfile::tempdir().expect("tempdir");
    let (svg, json) = (dir.path().join("b.svg"), dir.path().join("b.json"));
    let out = common::run_ok(&[
        "bench",
        "--spec-synth-rates",
        "0,1",
        "--spec-synth-k",
        "1,3",
        "--prompt-len",
        "16",
        "--gen-len",
        "12",
        "--runs",
        "1",
        "--plot",
        svg.to_str().expect("utf-8"),
        "--json",
        json.to_str().expect("utf-8"),
    ]);
    let table = String::from_utf8_lossy(&out);
    assert!(table.contains("| 3 | 1 |"), "{table}");
    let svg = std::fs::read_to_string(svg).expect("svg");
    assert!(svg.contains("break-even") && svg.contains("k = 3"), "{svg}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).expect("json")).expect("parse");
    let cells = doc["report"]["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 4);
    for c in cells {
        let (rate, acc) = (
            c["rate"].as_f64().expect("rate"),
            c["acceptance"].as_f64().expect("acc"),
        );
        assert_eq!(
            acc, rate,
            "drafts right exactly at the set rate 0 or 1: {c}"
        );
        let want_len = if rate == 1.0 {
            1.0 + c["k"].as_f64().expect("k")
        } else {
            1.0
        };
        // The last steps have fewer drafts (the request's end), so a bit under 1 + k.
        assert!(
            c["tokens_per_step"].as_f64().expect("len") <= want_len,
            "{c}"
        );
    }
}

/// serve: a request's `speculative` field turns speculation on (a server without `--spec`)
/// or off (a server with it), the same text either way; a bad setting is a 400 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_takes_speculative_per_request() {
    use common::server::Server;
    let client = reqwest::Client::new();
    let p = copy_prompt();
    let post = |s: &Server, extra: serde_json::Value| {
        let mut body = serde_json::json!({"prompt": p, "max_tokens": 40, "ignore_eos": true,
            "temperature": 0});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        client.post(s.url("/v1/completions")).json(&body).send()
    };
    let plain = Server::start(&[]);
    let r: serde_json::Value = post(&plain, serde_json::json!({}))
        .await
        .expect("POST")
        .json()
        .await
        .expect("json");
    let text = r["choices"][0]["text"].clone();
    assert_eq!(
        plain.metric("nanollm_spec_decode_num_drafts_total").await,
        0.0
    );
    let on = serde_json::json!({"speculative": {"num_speculative_tokens": 6, "force": true}});
    let r: serde_json::Value = post(&plain, on)
        .await
        .expect("POST")
        .json()
        .await
        .expect("json");
    assert_eq!(r["choices"][0]["text"], text);
    assert!(plain.metric("nanollm_spec_decode_num_drafts_total").await > 0.0);
    let bad = post(&plain, serde_json::json!({"speculative": {"k": 2}}))
        .await
        .expect("POST");
    assert_eq!(bad.status(), 400);
    let e: serde_json::Value = bad.json().await.expect("json");
    assert_eq!(e["error"]["param"], "speculative.k", "{e}");
    drop(plain);
    let spec = Server::start(&["--spec", "ngram"]);
    let r: serde_json::Value = post(&spec, serde_json::json!({"speculative": false}))
        .await
        .expect("POST")
        .json()
        .await
        .expect("json");
    assert_eq!(r["choices"][0]["text"], text);
    assert_eq!(
        spec.metric("nanollm_spec_decode_num_drafts_total").await,
        0.0
    );
}

/// `run-batch --spec draft` with the model as its own draft: every draft kept, the same
/// outputs as plain decoding.
#[test]
fn run_batch_with_a_draft_model_gives_the_plain_outputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.jsonl");
    let lines: Vec<String> = PROMPTS
        .iter()
        .enumerate()
        .map(|(i, p)| {
            serde_json::json!({"custom_id": format!("r{i}"), "prompt": p.replace("{P}", PASSAGE),
                "max_tokens": 24, "ignore_eos": true})
            .to_string()
        })
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").expect("write");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let model = path(&common::model_path());
    let texts = |extra: &[&str]| {
        let out = dir.path().join("out.jsonl");
        let mut args = vec!["run-batch", "-i", &path(&input), "-o", &path(&out)]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        args.extend(extra.iter().map(|s| s.to_string()));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let stderr =
            String::from_utf8_lossy(&common::nanollm().args(&a).output().expect("run").stderr)
                .to_string();
        let mut rows: Vec<(String, String)> = std::fs::read_to_string(&out)
            .expect("output")
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("json");
                let id = v["custom_id"].as_str().expect("id").to_string();
                (id, v["token_ids"].to_string())
            })
            .collect();
        rows.sort();
        (rows, stderr)
    };
    let (plain, _) = texts(&[]);
    let (spec, stderr) = texts(&["--spec", "draft", "--draft-model", &model, "--spec-force"]);
    assert_eq!(spec, plain, "{stderr}");
    assert_eq!(plain.len(), PROMPTS.len());
    // The default budget grows by the draft's share: one sequence still fits.
    let (one, stderr) = texts(&[
        "--spec",
        "draft",
        "--draft-model",
        &model,
        "--max-num-seqs",
        "1",
    ]);
    assert_eq!(one, plain, "{stderr}");
    // A --kv-mem too small for a block of each model: one line, no output.
    let out = dir.path().join("small.jsonl");
    let run = common::nanollm()
        .args([
            "run-batch",
            "-i",
            &path(&input),
            "-o",
            &path(&out),
            "--kv-mem",
            "500KiB",
        ])
        .args(["--spec", "draft", "--draft-model", &model])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(err.contains("holds no block of the model's"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!out.exists());
}

/// `run-batch --spec ngram --trace`: each verify step is an instant on its request's track
/// with the drafts kept and rolled back, and the file still draws (`trace-svg`).
#[test]
fn the_trace_shows_verify_steps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.jsonl");
    let line = serde_json::json!({"custom_id": "c", "prompt": copy_prompt(), "max_tokens": 32,
        "ignore_eos": true});
    std::fs::write(&input, format!("{line}\n")).expect("write");
    let (out, trace) = (dir.path().join("out.jsonl"), dir.path().join("t.json"));
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    common::run_ok(&[
        "run-batch",
        "-i",
        &path(&input),
        "-o",
        &path(&out),
        "--spec",
        "ngram",
        "--spec-force",
        "--trace",
        &path(&trace),
    ]);
    let text = std::fs::read_to_string(&trace).expect("trace");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    let events = doc.as_array().expect("an array of trace events");
    let verifies: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["ph"] == "n" && e["name"].as_str().is_some_and(|n| n.starts_with("verify ")))
        .collect();
    assert!(!verifies.is_empty(), "no verify event");
    let (mut drafted, mut accepted) = (0, 0);
    for v in &verifies {
        let a = &v["args"];
        let (d, k, r) = (
            a["drafted"].as_u64().expect("d"),
            a["accepted"].as_u64().expect("a"),
            a["rolled_back"].as_u64().expect("r"),
        );
        assert_eq!(d, k + r, "{v}");
        drafted += d;
        accepted += k;
    }
    let result: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&out)
            .expect("out")
            .lines()
            .next()
            .expect("a line"),
    )
    .expect("json");
    let spec = &result["stats"]["spec"];
    assert_eq!(spec["num_draft_tokens"], drafted, "{result}");
    assert_eq!(spec["num_accepted_tokens"], accepted);
    let svg = dir.path().join("t.svg");
    common::run_ok(&["trace-svg", &path(&trace), "-o", &path(&svg)]);
}
