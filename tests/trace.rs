//! `--trace FILE.json` on generate, run-batch, bench and serve, and `nanollm trace-svg`: the
//! file is Chrome trace-event JSON (every event has the fields its `ph` requires, `X` spans
//! nest on their track, `b`/`e` spans of one id balance and nest), its steps are the run's
//! steps and its request spans the run's requests; bad paths are refused before the run.
mod common;
use common::{fails_with, model_path, nanollm};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// What a valid trace holds, per process (pid).
#[derive(Debug, Default)]
struct Summary {
    /// "step N" numbers, in file order.
    steps: BTreeMap<u64, Vec<u64>>,
    /// Request spans ("request N" begins, counting continued ones once).
    requests: BTreeMap<u64, usize>,
    /// Every event.
    events: Vec<Value>,
}

/// The events of a trace file; its closing `]` may be missing (a killed writer).
fn events_of(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read trace");
    assert!(text.starts_with("[\n"), "{text:.200}");
    let body = text.trim_end();
    let fixed = match body.strip_suffix(']') {
        Some(_) => body.to_string(),
        None => format!("{}]", body.trim_end_matches(',')),
    };
    let v: Value = serde_json::from_str(&fixed).expect("a JSON array");
    v.as_array().expect("an array").clone()
}

fn num(e: &Value, key: &str) -> f64 {
    e[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number: {e}"))
}

/// Check every rule of the format on `path` and summarise it.
fn check(path: &Path) -> Summary {
    let events = events_of(path);
    let mut s = Summary::default();
    // (pid, tid) → open X spans (start, end); (pid, cat, id) → open async names.
    let mut x_by_track: BTreeMap<(u64, u64), Vec<&Value>> = BTreeMap::new();
    let mut open: BTreeMap<(u64, String, String), Vec<String>> = BTreeMap::new();
    let mut last_ts: BTreeMap<(u64, String, String), f64> = BTreeMap::new();
    for e in &events {
        let name = e["name"].as_str().unwrap_or_else(|| panic!("no name: {e}"));
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no ph: {e}"));
        num(e, "ts");
        let pid = e["pid"].as_u64().unwrap_or_else(|| panic!("no pid: {e}"));
        let tid = e["tid"].as_u64().unwrap_or_else(|| panic!("no tid: {e}"));
        match ph {
            "X" => {
                assert!(num(e, "dur") >= 0.0, "{e}");
                x_by_track.entry((pid, tid)).or_default().push(e);
                if let Some(n) = name.strip_prefix("step ") {
                    let n: u64 = n.parse().expect("step number");
                    s.steps.entry(pid).or_default().push(n);
                    for key in [
                        "batch_size",
                        "decode_seqs",
                        "prefill_seqs",
                        "tokens",
                        "prefill_tokens",
                        "blocks_used",
                        "blocks_cached",
                    ] {
                        assert!(e["args"][key].is_u64(), "{key}: {e}");
                    }
                }
            }
            "b" | "e" => {
                let cat = e["cat"].as_str().unwrap_or_else(|| panic!("no cat: {e}"));
                assert!(!e["id"].is_null(), "no id: {e}");
                let key = (pid, cat.to_string(), e["id"].to_string());
                let ts = num(e, "ts");
                let last = last_ts.entry(key.clone()).or_insert(ts);
                assert!(ts >= *last, "time went back for {key:?}: {e}");
                *last = ts;
                let stack = open.entry(key.clone()).or_default();
                if ph == "b" {
                    if name.starts_with("request ") && e["args"]["continued"].is_null() {
                        *s.requests.entry(pid).or_default() += 1;
                    }
                    stack.push(name.to_string());
                } else {
                    assert_eq!(stack.pop().as_deref(), Some(name), "{key:?}: {e}");
                }
            }
            "C" => {
                let args = e["args"].as_object().expect("C args");
                assert!(
                    !args.is_empty() && args.values().all(Value::is_number),
                    "{e}"
                );
            }
            "M" => assert!(e["args"]["name"].is_string(), "{e}"),
            other => panic!("unexpected ph {other}: {e}"),
        }
    }
    for (key, stack) in &open {
        assert!(stack.is_empty(), "{key:?} left open: {stack:?}");
    }
    // X spans of one track: sorted by start (longest first), each inside the enclosing
    // open one or after it.
    let eps = 1e-3;
    for (track, mut xs) in x_by_track {
        xs.sort_by(|a, b| {
            num(a, "ts")
                .total_cmp(&num(b, "ts"))
                .then(num(b, "dur").total_cmp(&num(a, "dur")))
        });
        let mut stack: Vec<(f64, f64)> = Vec::new();
        for x in xs {
            let (a, b) = (num(x, "ts"), num(x, "ts") + num(x, "dur"));
            while stack.last().is_some_and(|&(_, end)| a >= end - eps) {
                stack.pop();
            }
            if let Some(&(_, end)) = stack.last() {
                assert!(b <= end + eps, "{track:?}: {x} overlaps its parent");
            }
            stack.push((a, b));
        }
    }
    s.events = events;
    s
}

/// Steps 1..=n in order, for each process.
fn step_counts(s: &Summary) -> Vec<usize> {
    s.steps
        .values()
        .map(|v| {
            let expected: Vec<u64> = (1..=v.len() as u64).collect();
            assert_eq!(v, &expected, "steps not numbered 1..=n");
            v.len()
        })
        .collect()
}

fn model() -> String {
    model_path().display().to_string()
}

#[test]
fn generate_traces_its_prefill_and_each_decode_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("gen.json");
    let out = nanollm()
        .args(["generate", "-m", &model(), "-n", "6", "--json", "--trace"])
        .arg(&trace)
        .arg("What is the capital of Germany?")
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    let generated = doc["stats"]["generated_tokens"]
        .as_u64()
        .or_else(|| doc["generated_tokens"].as_u64())
        .unwrap_or_else(|| panic!("generated_tokens in {doc}"));
    let s = check(&trace);
    assert!(std::fs::read_to_string(&trace)
        .expect("read")
        .ends_with("}\n]\n"));
    assert_eq!(step_counts(&s), [generated as usize]);
    assert_eq!(s.requests.values().copied().collect::<Vec<_>>(), [1]);
}

/// Six requests sharing a prefix, four at a time, prefilled in chunks of 32 tokens.
fn batch_input(dir: &Path, max_tokens: usize) -> std::path::PathBuf {
    let prefix =
        "You answer questions about European geography in detail, naming rivers and regions. "
            .repeat(2);
    let lines: String = ["Germany", "France", "Spain", "Italy", "Poland", "Austria"]
        .iter()
        .map(|c| {
            serde_json::json!({"prompt": format!("{prefix}What is the capital of {c}?"), "max_tokens": max_tokens, "ignore_eos": true}).to_string() + "\n"
        })
        .collect();
    let input = dir.join("requests.jsonl");
    std::fs::write(&input, lines).expect("write input");
    input
}

/// The "N steps" of run-batch's aggregate.
fn batch_steps(stderr: &str) -> usize {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("duration"))
        .unwrap_or_else(|| panic!("no duration line: {stderr}"));
    let before = line.split(" step").next().unwrap_or("");
    before
        .rsplit(' ')
        .next()
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no step count in {line}"))
}

#[test]
fn run_batch_traces_every_step_request_chunk_and_prefix_hit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = batch_input(dir.path(), 8);
    let trace = dir.path().join("batch.json");
    let out = nanollm()
        .args(["run-batch", "-m", &model(), "--max-num-seqs", "4"])
        .args(["--max-num-batched-tokens", "32", "-o"])
        .arg(dir.path().join("out.jsonl"))
        .arg("-i")
        .arg(&input)
        .arg("--trace")
        .arg(&trace)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let s = check(&trace);
    assert_eq!(step_counts(&s), [batch_steps(&stderr)]);
    assert_eq!(s.requests.values().copied().collect::<Vec<_>>(), [6]);
    let named = |p: &str| {
        s.events
            .iter()
            .filter(|e| e["ph"] == "b" && e["name"].as_str().is_some_and(|n| n.starts_with(p)))
            .count()
    };
    // Prompts of ~40 tokens in chunks of at most 32: more than one chunk each (cold ones).
    assert!(named("prefill chunk 2/") > 0, "no second chunk");
    assert_eq!(named("decode"), 6);
    assert_eq!(named("queued"), 6);
    // The warm requests found the shared prefix: an admission served cached tokens.
    assert!(s
        .events
        .iter()
        .any(|e| e["args"]["cached_tokens"].as_u64() > Some(0)));
    assert!(s
        .events
        .iter()
        .any(|e| e["name"] == "KV blocks" && e["args"]["used"].as_u64() > Some(0)));
    // The SVG of it has a lane per request.
    let svg = dir.path().join("t.svg");
    let out = nanollm()
        .arg("trace-svg")
        .arg(&trace)
        .arg("-o")
        .arg(&svg)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&svg).expect("svg");
    for lane in [
        "steps",
        "KV blocks",
        "request 0",
        "request 5",
        "nanollm run-batch",
    ] {
        assert!(svg.contains(&format!(">{lane}<")), "no {lane} lane");
    }
}

#[test]
fn a_long_trace_rotates_into_balanced_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = batch_input(dir.path(), 64);
    let trace = dir.path().join("long.json");
    let out = nanollm()
        .args(["run-batch", "-m", &model(), "--max-num-seqs", "2", "-o"])
        .arg(dir.path().join("out.jsonl"))
        .arg("-i")
        .arg(&input)
        .arg("--trace")
        .arg(&trace)
        .args(["--trace-max-bytes", "64KiB"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let older = dir.path().join("long.1.json");
    assert!(
        older.is_file(),
        "no rotation: {} bytes",
        std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0)
    );
    // Each file valid and balanced on its own; together, every step once.
    let mut files = vec![trace.clone(), older];
    for k in 2..=3 {
        let p = dir.path().join(format!("long.{k}.json"));
        if p.is_file() {
            files.push(p);
        }
    }
    assert!(!dir.path().join("long.4.json").exists());
    let mut steps = 0;
    for f in &files {
        let s = check(f);
        assert!(std::fs::metadata(f).expect("size").len() < 64 * 1024 + 16 * 1024);
        assert_eq!(
            s.events[0]["ph"],
            "M",
            "{} starts without its names",
            f.display()
        );
        steps += s.steps.values().map(Vec::len).sum::<usize>();
    }
    // With more than 3 rotations the oldest files are gone: count only what is kept.
    if files.len() < 4 {
        assert_eq!(steps, batch_steps(&stderr));
    }
}

#[test]
fn bench_traces_each_run_as_a_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("bench.json");
    let json = dir.path().join("bench-report.json");
    let out = nanollm()
        .args([
            "bench",
            "-m",
            &model(),
            "--concurrency",
            "1,2",
            "--num-prompts",
            "3",
        ])
        .args(["--prompt-len", "16", "--gen-len", "4", "--json"])
        .arg(&json)
        .arg("--trace")
        .arg(&trace)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
    let levels = report["result"]["levels"].as_array().expect("levels");
    let expected: Vec<usize> = levels
        .iter()
        .map(|l| l["run"]["steps"].as_array().map_or(0, Vec::len))
        .collect();
    let s = check(&trace);
    assert_eq!(step_counts(&s), expected);
    assert_eq!(s.requests.values().copied().collect::<Vec<_>>(), [3, 3]);
    let names: Vec<&str> = s
        .events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert_eq!(names, ["concurrency 1", "concurrency 2"]);
}

#[test]
fn serve_traces_requests_and_closes_the_file_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("serve.json");
    let t = trace.display().to_string();
    let mut s = common::server::Server::start(&["-m", &model(), "--trace", &t]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = reqwest::Client::new();
        let calls = (0..3).map(|i| {
            let body = serde_json::json!({"prompt": format!("Count to {}:", i + 3), "max_tokens": 5, "ignore_eos": true});
            client
                .post(s.url("/v1/completions"))
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
        });
        for r in futures_join(calls).await {
            assert_eq!(r.expect("POST").status().as_u16(), 200);
        }
    });
    let pid = s.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
    let status = s.child.wait().expect("wait");
    assert!(status.success(), "{status:?}");
    let text = std::fs::read_to_string(&trace).expect("read");
    assert!(
        text.ends_with("}\n]\n"),
        "not closed: {:?}",
        &text[text.len().saturating_sub(80)..]
    );
    let sum = check(&trace);
    let steps = step_counts(&sum);
    assert_eq!(steps.len(), 1);
    assert!(steps[0] >= 5, "{steps:?}");
    assert_eq!(sum.requests.values().copied().collect::<Vec<_>>(), [3]);
    let finished: Vec<&str> = sum
        .events
        .iter()
        .filter_map(|e| e["args"]["finish_reason"].as_str())
        .collect();
    assert_eq!(finished, ["length"; 3]);
}

/// Run every future at once (each spawned on the runtime) and collect their outputs.
async fn futures_join<F, T>(calls: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = calls.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

#[test]
fn bad_trace_paths_are_refused_before_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = model();
    let missing = dir.path().join("no-such-dir").join("t.json");
    let missing = missing.display().to_string();
    let input = batch_input(dir.path(), 2).display().to_string();
    let before = std::fs::metadata(&m).expect("model").len();
    for args in [
        vec!["generate", "-m", &m, "-n", "2", "--trace", &missing, "Hi"],
        vec!["run-batch", "-m", &m, "-i", &input, "--trace", &missing],
        vec!["bench", "-m", &m, "--concurrency", "1", "--trace", &missing],
        vec!["serve", "-m", &m, "--port", "0", "--trace", &missing],
    ] {
        fails_with(&args, "does not exist");
    }
    for args in [
        vec!["generate", "-m", &m, "-n", "2", "--trace", &m, "Hi"],
        vec!["run-batch", "-m", &m, "-i", &input, "--trace", &m],
        vec!["bench", "-m", &m, "--concurrency", "1", "--trace", &m],
        vec!["serve", "-m", &m, "--port", "0", "--trace", &m],
    ] {
        fails_with(&args, "would replace the model");
    }
    assert_eq!(std::fs::metadata(&m).expect("model").len(), before);
    let t = dir.path().join("t.json").display().to_string();
    fails_with(
        &[
            "run-batch",
            "-m",
            &m,
            "-i",
            &input,
            "--trace",
            &t,
            "--trace-max-bytes",
            "1KiB",
        ],
        "at least 64KiB",
    );
    fails_with(
        &["run-batch", "-m", &m, "-i", &input, "--trace", &input],
        "the same file as --input",
    );
    fails_with(
        &["bench", "--base-url", "http://127.0.0.1:9", "--trace", &t],
        "not available with --base-url",
    );
    assert!(!Path::new(&t).exists(), "a refused run left a trace");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn trace_svg_refuses_what_it_cannot_draw() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("t.svg").display().to_string();
    let not_json = dir.path().join("x.json");
    std::fs::write(&not_json, "hello").expect("write");
    let x = not_json.display().to_string();
    fails_with(
        &["trace-svg", &x, "-o", &svg],
        "not a Chrome trace-event JSON array",
    );
    fails_with(
        &["trace-svg", "/no/such.json", "-o", &svg],
        "cannot read it",
    );
    fails_with(&["trace-svg", &x, "-o", &x], "the same file as the trace");
    fails_with(
        &["trace-svg", &x, "-o", "/no/such/dir/t.svg"],
        "does not exist",
    );
    // A file past the size cap is refused from its size, unread (sparse: no disk used).
    let huge = dir.path().join("huge.json");
    let f = std::fs::File::create(&huge).expect("create");
    f.set_len((1 << 30) + 1).expect("set_len");
    fails_with(
        &["trace-svg", &huge.display().to_string(), "-o", &svg],
        "larger than 1073741824 bytes",
    );
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "[\n").expect("write");
    fails_with(
        &["trace-svg", &empty.display().to_string(), "-o", &svg],
        "no events",
    );
    assert!(!Path::new(&svg).exists());
}

#[test]
fn preemptions_under_a_tight_kv_budget_are_traced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = batch_input(dir.path(), 64);
    let trace = dir.path().join("tight.json");
    // 11 blocks of 16 tokens for 4 sequences of ~100 tokens: the newest is preempted.
    let out = nanollm()
        .args([
            "run-batch",
            "-m",
            &model(),
            "--max-num-seqs",
            "4",
            "--kv-mem",
            "4MiB",
        ])
        .args(["--max-model-len", "128", "-o"])
        .arg(dir.path().join("out.jsonl"))
        .arg("-i")
        .arg(&input)
        .arg("--trace")
        .arg(&trace)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let preemptions: usize = stderr
        .lines()
        .find(|l| l.starts_with("KV cache"))
        .and_then(|l| l.split(" preemption").next())
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no preemption count: {stderr}"));
    assert!(preemptions > 0, "{stderr}");
    let s = check(&trace);
    assert_eq!(step_counts(&s), [batch_steps(&stderr)]);
    assert_eq!(s.requests.values().copied().collect::<Vec<_>>(), [6]);
    let begun = |name: &str| {
        s.events
            .iter()
            .filter(|e| e["ph"] == "b" && e["name"] == name)
            .count()
    };
    assert_eq!(begun("preempted"), preemptions);
    // A request preempted while decoding decodes again after its recompute.
    let preempted_decoding = s
        .events
        .windows(2)
        .filter(|w| w[0]["name"] == "decode" && w[0]["ph"] == "e" && w[1]["name"] == "preempted")
        .count();
    assert!(preempted_decoding > 0);
    assert_eq!(begun("decode"), 6 + preempted_decoding);
}
