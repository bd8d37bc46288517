//! `nanollm run-batch` and the serving benchmarks end to end on the default model: results
//! in input order that equal `generate`'s, and one clear error for bad input.
mod common;
use common::{fails_with, generate_ids, nanollm, run_ok};
use serde_json::Value;

/// Three requests at once (a raw prompt and two chats, different lengths): one JSON line
/// each, in input order, with the same tokens as `generate` alone, usage and stats.
#[test]
fn results_come_back_in_input_order_and_equal_generate() {
    let dir = tempfile::tempdir().expect("tmp");
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    std::fs::write(
        &input,
        "{\"prompt\": \"Once upon a time\", \"max_tokens\": 12}\n\
         \n\
         {\"custom_id\": \"fr\", \"messages\": [{\"role\": \"user\", \"content\": \"What is the capital of Germany?\"}], \"max_tokens\": 16}\n\
         {\"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"Name three primary colors.\"}], \"max_completion_tokens\": 9}}\n",
    )
    .expect("write");
    let out = nanollm()
        .args(["run-batch", "-i"])
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("requests              3"), "{stderr}");
    assert!(stderr.contains("0 blocks leaked"), "{stderr}");
    let text = std::fs::read_to_string(&output).expect("output");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 3);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["index"], i);
        let usage = &l["usage"];
        assert_eq!(
            usage["total_tokens"].as_u64(),
            Some(
                usage["prompt_tokens"].as_u64().unwrap_or(0)
                    + usage["completion_tokens"].as_u64().unwrap_or(0)
            )
        );
        assert!(l["stats"]["ttft_ms"].as_f64().is_some_and(|t| t > 0.0));
        // The names bench and generate use for the same figures.
        assert!(
            l["stats"]["peak_kv_blocks"].as_u64().is_some_and(|b| b > 0),
            "{l}"
        );
        assert!(l["stats"]["itl"].is_object(), "{l}");
    }
    assert_eq!(lines[1]["custom_id"], "fr");
    assert!(lines[1]["text"].as_str().unwrap_or("").contains("Berlin"));
    let ids = |l: &Value| -> Vec<u64> {
        l["token_ids"]
            .as_array()
            .expect("ids")
            .iter()
            .filter_map(Value::as_u64)
            .collect()
    };
    assert_eq!(
        ids(&lines[0]),
        generate_ids(&["--no-chat", "-n", "12", "Once upon a time"])
    );
    assert_eq!(
        ids(&lines[1]),
        generate_ids(&["-n", "16", "What is the capital of Germany?"])
    );
    assert_eq!(
        ids(&lines[2]),
        generate_ids(&["-n", "9", "Name three primary colors."])
    );
}

/// `ignore_eos` on a line generates exactly `max_tokens`, past the end-of-sequence token
/// the same chat stops at without it (8 tokens: "The capital of Germany is Berlin."); a line
/// without `max_tokens` generates up to the end of the context.
#[test]
fn ignore_eos_generates_past_the_end_of_sequence() {
    let dir = tempfile::tempdir().expect("tmp");
    let input = dir.path().join("in.jsonl");
    let no_max =
        "\"messages\": [{\"role\": \"user\", \"content\": \"What is the capital of Germany?\"}]";
    let chat = format!("{no_max}, \"max_tokens\": 14");
    std::fs::write(
        &input,
        format!(
            "{{{chat}}}\n{{{chat}, \"ignore_eos\": true}}\n{{{no_max}, \"ignore_eos\": true}}\n"
        ),
    )
    .expect("write");
    let stdout = run_ok(&[
        "run-batch",
        "-i",
        input.to_str().expect("UTF-8 path"),
        "--max-model-len",
        "60",
    ]);
    let lines: Vec<Value> = String::from_utf8_lossy(&stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let n = |l: &Value| l["token_ids"].as_array().map_or(0, Vec::len);
    assert_eq!(lines[0]["finish_reason"], "stop");
    assert_eq!(lines[0]["stats"]["finish"], "eos");
    assert!(n(&lines[0]) < 14, "{}", lines[0]);
    // Without max_tokens, --max-tokens (256) is capped at the context left after the prompt
    // (vLLM's default is that room), not refused.
    let prompt = lines[2]["usage"]["prompt_tokens"].as_u64().unwrap_or(0) as usize;
    assert_eq!(n(&lines[2]), 60 - prompt, "{}", lines[2]);
    assert_eq!(lines[2]["finish_reason"], "length");
    assert_eq!(lines[1]["finish_reason"], "length");
    assert_eq!(n(&lines[1]), 14);
    assert_eq!(
        lines[0]["token_ids"]
            .as_array()
            .map(|a| a[..n(&lines[0]) - 1].to_vec()),
        lines[1]["token_ids"]
            .as_array()
            .map(|a| a[..n(&lines[0]) - 1].to_vec())
    );
}

#[test]
fn bad_input_gets_one_clear_line_and_no_output_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    let (i, o) = (
        input.to_string_lossy().into_owned(),
        output.to_string_lossy().into_owned(),
    );
    std::fs::write(
        &input,
        "{\"prompt\": \"hi\"}\n{\"prompt\": \"x\", \"max_tokens\": \"many\"}\n",
    )
    .expect("write");
    fails_with(
        &["run-batch", "-i", &i, "-o", &o],
        "--input line 2: max_tokens: expected a non-negative integer",
    );
    std::fs::write(&input, "{\"prompt\": \"hi\"}\nnot json\n").expect("write");
    fails_with(
        &["run-batch", "-i", &i, "-o", &o],
        "--input line 2: not JSON",
    );
    std::fs::write(&input, "{\"prompt\": \"hi\"}\n").expect("write");
    fails_with(
        &["run-batch", "-i", &i, "-o", &o, "--max-num-seqs", "0"],
        "--max-num-seqs 0",
    );
    fails_with(
        &["run-batch", "-i", &i, "-o", &o, "--kv-mem", "1KiB"],
        "--kv-mem 1KiB: smaller than one KV block",
    );
    fails_with(
        &["run-batch", "-i", &i, "-o", &o, "--kv-mem", "1MiB"],
        "raise --kv-mem",
    );
    fails_with(
        &["run-batch", "-i", "/nonexistent/x.jsonl"],
        "--input /nonexistent/x.jsonl",
    );
    // An empty or blank input names the file (found by a bug hunt: it named only the flag).
    std::fs::write(&input, "").expect("write");
    fails_with(
        &["run-batch", "-i", &i, "-o", &o],
        &format!("--input {i}: no request: the input is empty"),
    );
    std::fs::write(&input, "\n  \n").expect("write");
    fails_with(
        &["run-batch", "-i", &i, "-o", &o],
        &format!("--input {i}: no request: the input is blank"),
    );
    std::fs::write(&input, b"{\"prompt\": \"hi\"}\n\xff\xfe\n").expect("write");
    fails_with(
        &["run-batch", "-i", &i, "-o", &o],
        "line 2: is not UTF-8 text",
    );
    assert!(!output.exists(), "no partial output file");
    // The output may not replace the input.
    std::fs::write(&input, "{\"prompt\": \"hi\"}\n").expect("write");
    fails_with(
        &["run-batch", "-i", &i, "-o", &i],
        "the same file as --input",
    );
    assert_eq!(
        std::fs::read_to_string(&input).expect("read"),
        "{\"prompt\": \"hi\"}\n"
    );
    // A line's own max_tokens past the context is refused (the --max-tokens default is
    // capped instead: `ignore_eos_generates_past_the_end_of_sequence`).
    std::fs::write(&input, "{\"prompt\": \"hi\", \"max_tokens\": 9000}\n").expect("write");
    fails_with(&["run-batch", "-i", &i], "max_tokens 9000 with a");
    fails_with(&["bench", "--concurrency", "0"], "--concurrency 0");
    // Scenario and level flags are checked before the model loads ("running…" never shows).
    fails_with(
        &["bench", "--concurrency", "2", "--num-prompts", "0"],
        "--num-prompts 0",
    );
    fails_with(
        &["bench", "--scenario", "shared-prefix", "--prefix-len", "0"],
        "--prefix-len 0",
    );
    fails_with(
        &["bench", "--scenario", "shared-prefix", "--requests", "1"],
        "--requests 1",
    );
    fails_with(
        &["bench", "--scenario", "chat", "--turns", "0"],
        "--turns 0",
    );
    fails_with(
        &["bench", "--concurrency", "1,2", "--prompt-len", "16,32"],
        "give one length",
    );
    fails_with(
        &["bench", "--concurrency", "1,2,1"],
        "--concurrency: 1 is listed twice",
    );
    fails_with(
        &[
            "bench",
            "--scenario",
            "chunked-prefill",
            "--long-prompt-len",
            "0",
        ],
        "--long-prompt-len 0: must be at least 1",
    );
    fails_with(
        &["bench", "--scenario", "chunked-prefill", "--requests", "0"],
        "--requests 0: must be at least 1",
    );
    // A negative value after a space reaches the flag's own check.
    fails_with(
        &["run-batch", "-i", &i, "--kv-mem", "-1MiB"],
        "--kv-mem '-1MiB': a size cannot be negative",
    );
    fails_with(
        &["bench", "--concurrency", "1", "--request-rate", "1e-300"],
        "--request-rate 1e-300: requests would arrive more than 1,000 s apart",
    );
}

/// Requests and budgets whose arithmetic would overflow are refused by name, after the
/// model loads: a `max_tokens` of 2^64 − 1, a `--max-num-seqs` whose default KV budget
/// passes 2^64 blocks, one the OS cannot reserve; a shared-prefix prompt past
/// `--max-model-len` is refused before any request runs.
#[test]
fn overflowing_lengths_and_budgets_name_their_flags() {
    let dir = tempfile::tempdir().expect("tmp");
    let input = dir.path().join("in.jsonl");
    let i = input.to_string_lossy().into_owned();
    std::fs::write(
        &input,
        "{\"prompt\": \"a\", \"max_tokens\": 18446744073709551615}\n",
    )
    .expect("write");
    fails_with(
        &["run-batch", "-i", &i, "--max-model-len", "32"],
        "max_tokens 18446744073709551615 with a 1-token prompt is more than --max-model-len 32",
    );
    std::fs::write(&input, "{\"prompt\": \"a\", \"max_tokens\": 2}\n").expect("write");
    fails_with(
        &["run-batch", "-i", &i, "--max-num-seqs", "36028797018963968"],
        "--max-num-seqs 36028797018963968 × --max-model-len 8192: a default KV budget past 2^64 blocks",
    );
    // A default budget past the machine is capped (the_default_kv_budget_fits_the_machine);
    // one given with --kv-mem that the OS will not reserve is named.
    fails_with(
        &["run-batch", "-i", &i, "--kv-mem", "1000TiB"],
        "--kv-mem 1000TiB: cannot reserve 1099511627489280 bytes of address space for the KV pool",
    );
    fails_with(
        &[
            "bench",
            "--scenario",
            "shared-prefix",
            "--prefix-len",
            "8k",
            "--suffix-len",
            "4",
            "--requests",
            "2",
            "--gen-len",
            "2",
        ],
        "--prefix-len 8192 + --suffix-len 4 + --gen-len 2: 8198 tokens do not fit --max-model-len 8192",
    );
    // The generated tokens count too (they were cut short at the context, silently).
    fails_with(
        &[
            "bench", "--scenario", "shared-prefix", "--prefix-len", "256", "--suffix-len",
            "64", "--requests", "2", "--gen-len", "16", "--max-model-len", "324",
        ],
        "--prefix-len 256 + --suffix-len 64 + --gen-len 16: 336 tokens do not fit --max-model-len 324",
    );
    fails_with(
        &[
            "bench",
            "--concurrency",
            "1",
            "--prompt-len",
            "64",
            "--gen-len",
            "64",
            "--max-model-len",
            "100",
        ],
        "--prompt-len 64 + --gen-len 64: 128 tokens do not fit --max-model-len 100",
    );
    // A chat's history grows each turn: the turn that would not fit is named (after the
    // turns that fit have run, so not the one-line form above).
    let out = nanollm()
        .args([
            "bench",
            "--scenario",
            "chat",
            "--turns",
            "3",
            "--gen-len",
            "64",
        ])
        .args(["--max-model-len", "150"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("error: --scenario chat: turn 2 re-sends")
            && stderr.contains("past --max-model-len 150"),
        "{stderr}"
    );
}

/// The serving benchmark on a tiny workload: every level generates the same tokens as
/// concurrency 1 and no block leaks (the report says so, exit 0).
#[test]
fn bench_concurrency_levels_agree() {
    let dir = tempfile::tempdir().expect("tmp");
    let json = dir.path().join("c.json");
    let svg = dir.path().join("steps.svg");
    let out = nanollm()
        .args([
            "bench",
            "--concurrency",
            "1,3",
            "--prompt-len",
            "24",
            "--gen-len",
            "6",
            "--json",
        ])
        .arg(&json)
        .arg("--plot")
        .arg(&svg)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("same tokens"), "{stdout}");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
    let levels = doc["result"]["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 2);
    for l in levels {
        assert_eq!(l["identical_to_first_level"], true);
        assert_eq!(l["run"]["blocks_leaked"], 0);
        assert_eq!(l["output_tokens"], 18);
        assert!(
            l["tpot"]["mean_ms"].as_f64().is_some_and(|t| t > 0.0),
            "{l}"
        );
        let steps = l["run"]["steps"].as_array().expect("steps");
        assert!(steps
            .iter()
            .all(|s| s["batch_size"].as_u64().is_some_and(|b| b >= 1)));
    }
    let max_batch = |l: &Value| {
        l["run"]["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .filter_map(|s| s["batch_size"].as_u64())
            .max()
    };
    assert_eq!(max_batch(&levels[0]), Some(1));
    assert_eq!(max_batch(&levels[1]), Some(3));
    // The step chart: latency and batch size panels, one line per level in each.
    let chart = std::fs::read_to_string(&svg).expect("svg");
    assert_eq!(chart.matches("<polyline").count(), 4);
    assert!(chart.contains("concurrency 3"));
}

/// With one generated token per request there is no TPOT: the table says so and the JSON
/// has null (it had 0.0 ms, a figure nothing measured).
#[test]
fn bench_concurrency_one_token_has_no_tpot() {
    let dir = tempfile::tempdir().expect("tmp");
    let json = dir.path().join("c.json");
    let out = nanollm()
        .args([
            "bench",
            "--concurrency",
            "2",
            "--num-prompts",
            "2",
            "--prompt-len",
            "8",
            "--gen-len",
            "1",
            "--json",
        ])
        .arg(&json)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("- (one token each)"), "{stdout}");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
    let level = &doc["result"]["levels"][0];
    assert_eq!(level["output_tokens"], 2);
    assert!(level["tpot"].is_null(), "{level}");
    assert!(level["ttft"]["mean_ms"].as_f64().is_some_and(|t| t > 0.0));
}

/// Scenario flags that the chosen benchmark ignores get one warning line each (as
/// `generate` warns about sampling flags under greedy decoding), and the run goes on.
#[test]
fn ignored_scenario_flags_are_warned_about() {
    let out = nanollm()
        .args([
            "bench",
            "--concurrency",
            "1",
            "--num-prompts",
            "1",
            "--prompt-len",
            "8",
            "--gen-len",
            "2",
            "--turns",
            "3",
            "--prefix-len",
            "32",
        ])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: --turns has no effect without --scenario chat\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: --prefix-len has no effect without --scenario shared-prefix\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("--suffix-len"), "{stderr}");
    let out = nanollm()
        .args([
            "bench",
            "--scenario",
            "chat",
            "--turns",
            "1",
            "--prompt-len",
            "16",
            "--gen-len",
            "2",
        ])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: --prompt-len has no effect with --scenario chat\n"),
        "{stderr}"
    );
}

/// The shared-prefix scenario: its "block arithmetic" hit rate is on the measured rate's
/// basis (tokens), so they agree when the prompt is not whole blocks (256 + 64 in blocks
/// of 256: 80.0% both; it said 50.0%), and --no-enable-prefix-caching, which it cannot
/// honour (it runs the cache on, then off), is warned about.
#[test]
fn shared_prefix_expected_rate_matches_and_cache_flag_is_warned_about() {
    let out = nanollm()
        .args([
            "bench",
            "--scenario",
            "shared-prefix",
            "--prefix-len",
            "256",
            "--suffix-len",
            "64",
            "--requests",
            "2",
            "--gen-len",
            "2",
            "--block-size",
            "256",
            "--no-enable-prefix-caching",
            "--json",
            "-",
        ])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: --no-enable-prefix-caching has no effect with --scenario"),
        "{stderr}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let r = &doc["result"]["shared_prefix"];
    let (measured, expected) = (
        r["warm_hit_rate_pct"].as_f64().expect("warm_hit_rate_pct"),
        r["expected_hit_rate_pct"]
            .as_f64()
            .expect("expected_hit_rate_pct"),
    );
    assert!(
        (measured - 80.0).abs() < 1e-9 && (expected - 80.0).abs() < 1e-9,
        "{r}"
    );
}

/// vLLM's `stop_token_ids`: the request ends at the first listed id as at end-of-sequence
/// (the id is the last token, not in the text), even with `ignore_eos`.
#[test]
fn stop_token_ids_end_a_request_even_with_ignore_eos() {
    let dir = tempfile::tempdir().expect("tmp");
    let input = dir.path().join("in.jsonl");
    let line = "\"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"ignore_eos\": true";
    std::fs::write(&input, format!("{{{line}}}\n")).expect("write");
    let run = || -> Vec<Value> {
        let stdout = run_ok(&["run-batch", "-i", input.to_str().expect("UTF-8 path")]);
        String::from_utf8_lossy(&stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect()
    };
    let plain = run().remove(0);
    let ids: Vec<u64> = plain["token_ids"]
        .as_array()
        .expect("token_ids")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(ids.len(), 12, "{plain}");
    // The first id that has not occurred before position 3 ends the run there.
    let at = (3..ids.len())
        .find(|&i| !ids[..i].contains(&ids[i]))
        .expect("a new id");
    std::fs::write(
        &input,
        format!("{{{line}, \"stop_token_ids\": [{}]}}\n", ids[at]),
    )
    .expect("write");
    let stopped = run().remove(0);
    assert_eq!(stopped["finish_reason"], "stop", "{stopped}");
    let got: Vec<u64> = stopped["token_ids"]
        .as_array()
        .expect("token_ids")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(got, ids[..=at].to_vec());
    let text = plain["text"].as_str().expect("text");
    assert!(text.starts_with(stopped["text"].as_str().expect("text")));
    assert!(stopped["text"].as_str().expect("text").len() < text.len());
}

/// On a model with a long context (the default model's GGUF with `llama.context_length`
/// 131,072) the default KV budget — 16 sequences of the whole context, 48 GB — is capped
/// at half the machine's memory, said in one line, and the engine runs (it was refused
/// before: the 48 GB reservation failed).
#[test]
fn the_default_kv_budget_fits_the_machine() {
    use candle_core::quantized::gguf_file::{self, Value as GgufValue};
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("long-context.gguf");
    let mut file = std::fs::File::open(common::model_path()).expect("open model");
    let content = gguf_file::Content::read(&mut file).expect("read gguf");
    let mut metadata: Vec<(String, GgufValue)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in metadata.iter_mut() {
        if k == "llama.context_length" {
            *v = GgufValue::U32(131_072);
        }
    }
    let tensors: Vec<(String, candle_core::quantized::QTensor)> = content
        .tensor_infos
        .keys()
        .map(|n| {
            let t = content
                .tensor(&mut file, n, &candle_core::Device::Cpu)
                .expect("tensor");
            (n.clone(), t)
        })
        .collect();
    let md: Vec<(&str, &GgufValue)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &candle_core::quantized::QTensor)> =
        tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
    gguf_file::write(&mut w, &md, &ts).expect("write gguf");
    drop(w);

    let out = nanollm()
        .args(["bench", "--concurrency", "2", "--num-prompts", "2"])
        .args(["--prompt-len", "8", "--gen-len", "3", "-m"])
        .arg(&path)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // 16 × 131,072 tokens × 23,040 bytes (30 layers × 3 KV heads × 64 × 2 × f16).
    let wanted = 16u64 * 131_072 * 23_040;
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            let l = t.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
            l.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map(|kib| kib * 1024);
    if ram.is_some_and(|r| r / 2 < wanted) {
        let notes: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("note: default KV budget capped at"))
            .collect();
        assert_eq!(notes.len(), 1, "{stderr}");
        assert!(
            notes[0].contains(
                "(16 sequences of 131072 tokens would take 45.00 GiB); set --kv-mem to choose"
            ),
            "{stderr}"
        );
    }
}
