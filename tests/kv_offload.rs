//! The prefix cache's disk tier (`--kv-offload-dir`) on the real models: a disk hit gives
//! the same greedy tokens as a pool hit and as a miss (the blocks are the same bytes), after
//! an eviction and after a restart, on the default model and on Gemma 3's sliding-window
//! groups; other settings never hit; damaged files are skipped with a warning; a crash in
//! the middle of writing (a fault-injection point) leaves nothing read as valid; a server
//! restarted after SIGTERM serves a warm prefix from disk.
mod common;
use nanollm::engine::llm_engine::{EngineConfig, Finished, LlmEngine, SchedulerConfig};
use nanollm::engine::{CacheConfig, Request};
use nanollm::kv::offload::{Fingerprint, OffloadConfig};
use nanollm::kv::KvDtype;
use std::path::{Path, PathBuf};

/// ~330 tokens shared by every request of a test (20 full blocks of 16).
fn system() -> String {
    "You are a careful assistant who answers questions about ships, tides and harbours. ".repeat(20)
}

fn offload(dir: &Path, settings: &str) -> &'static OffloadConfig {
    Box::leak(Box::new(OffloadConfig {
        dir: dir.to_path_buf(),
        max_bytes: 1 << 30,
        fingerprint: Fingerprint::of(&[("test", settings.to_string())]),
    }))
}

fn config(
    cache: CacheConfig,
    blocks: usize,
    max_len: usize,
    tier: Option<&'static OffloadConfig>,
) -> EngineConfig {
    EngineConfig {
        cache,
        num_blocks: blocks,
        max_model_len: max_len,
        offload: tier,
        speculative: None,
        scheduler: SchedulerConfig {
            max_num_seqs: 4,
            max_num_batched_tokens: 128,
            enable_prefix_caching: true,
        },
    }
}

/// Run `req` alone through `eng` to the end.
fn run(eng: &mut LlmEngine<'_>, req: &Request) -> Finished {
    eng.add_request(req.clone()).expect("add");
    for _ in 0..10_000 {
        if let Some(f) = eng.step(false).expect("step").finished.pop() {
            assert_eq!(eng.pool().num_used_blocks(), 0, "blocks leaked");
            return f;
        }
    }
    panic!("the engine does not finish");
}

/// (pool hit tokens, disk hit tokens) of `eng` so far.
fn hits(eng: &LlmEngine<'_>) -> (u64, u64) {
    (eng.prefix_cache_counters().1, eng.prefix_disk_hits())
}

#[test]
fn disk_hit_equals_pool_hit_equals_miss_after_eviction_and_restart() {
    let m = common::model();
    let cache = CacheConfig::default();
    let dir = tempfile::tempdir().unwrap();
    let tier = offload(dir.path(), "f16");
    let p = common::greedy_request(
        m,
        &format!("{}Question: what is a tide?", system()),
        12,
        cache,
    );
    let want = common::alone(m, &p);
    // 30 blocks: one request (~22 blocks) fits, a second other prompt evicts the first's.
    let mut eng =
        LlmEngine::new(&m.decoder, &m.tokenizer, config(cache, 30, 400, Some(tier))).unwrap();
    assert_eq!(run(&mut eng, &p).generation.tokens, want, "miss");
    assert_eq!(hits(&eng), (0, 0));
    assert_eq!(run(&mut eng, &p).generation.tokens, want, "pool hit");
    let (pool_hit, disk_hit) = hits(&eng);
    assert!(pool_hit >= 320 && disk_hit == 0, "{pool_hit} {disk_hit}");
    // Two other prompts of ~20 blocks each: every block of the first is evicted.
    for text in [
        "Harbour pilots guide ships through narrow channels. ",
        "Lighthouse keepers once trimmed their lamps every night. ",
    ] {
        run(
            &mut eng,
            &common::greedy_request(m, &text.repeat(30), 4, cache),
        );
    }
    assert!(
        eng.pool().evictions() > 0,
        "the first prompt's blocks were not evicted"
    );
    eng.flush_offload();
    let before = hits(&eng);
    let f = run(&mut eng, &p);
    assert_eq!(f.generation.tokens, want, "disk hit after eviction");
    let disk = hits(&eng).1 - before.1;
    assert!(disk >= 320, "only {disk} tokens came from disk");
    assert_eq!(hits(&eng).0, before.0, "the pool still held some");
    assert_eq!(
        f.cached_prompt_tokens as u64,
        disk + hits(&eng).0 - before.0
    );
    let t = eng.offload_stats().unwrap();
    assert_eq!(
        t.bytes_read,
        t.blocks_read * eng.pool().block_bytes() as u64
    );
    assert_eq!(t.files_rejected + t.writes_dropped, 0);
    drop(eng);
    // A restart: a new engine (a new pool, nothing cached) over the same directory.
    let mut eng =
        LlmEngine::new(&m.decoder, &m.tokenizer, config(cache, 30, 400, Some(tier))).unwrap();
    let f = run(&mut eng, &p);
    assert_eq!(f.generation.tokens, want, "disk hit after a restart");
    assert_eq!(hits(&eng).0, 0);
    assert!(hits(&eng).1 >= 320, "{:?}", hits(&eng));
    drop(eng);
    // Other settings (here q8_0 KV) never hit the f16 blocks.
    let q8 = CacheConfig {
        dtype: KvDtype::Q8_0,
        ..cache
    };
    let pq = common::greedy_request(m, &format!("{}Question: what is a tide?", system()), 12, q8);
    let mut eng = LlmEngine::new(
        &m.decoder,
        &m.tokenizer,
        config(q8, 60, 400, Some(offload(dir.path(), "q8_0"))),
    )
    .unwrap();
    assert_eq!(run(&mut eng, &pq).generation.tokens, common::alone(m, &pq));
    assert_eq!(hits(&eng), (0, 0), "a block of other settings was used");
}

/// Gemma 3's sliding-window groups (window 512) come back from disk too: a prompt past
/// the window, after a restart, equals the miss.
#[test]
fn gemma3_sliding_groups_come_back_from_disk() {
    let m = common::gemma3();
    let cache = CacheConfig::default();
    let dir = tempfile::tempdir().unwrap();
    let tier = offload(dir.path(), "gemma3");
    let text = format!("{}{}Question: what is a tide?", system(), system());
    let p = common::greedy_request(m, &text, 8, cache);
    assert!(p.prompt_ids.len() > 600, "{} tokens", p.prompt_ids.len());
    let want = common::alone(m, &p);
    let mut eng = LlmEngine::new(
        &m.decoder,
        &m.tokenizer,
        config(cache, 400, 1024, Some(tier)),
    )
    .unwrap();
    assert_eq!(run(&mut eng, &p).generation.tokens, want, "miss");
    drop(eng);
    let mut eng = LlmEngine::new(
        &m.decoder,
        &m.tokenizer,
        config(cache, 400, 1024, Some(tier)),
    )
    .unwrap();
    assert_eq!(run(&mut eng, &p).generation.tokens, want, "disk hit");
    let disk = hits(&eng).1;
    assert!(
        disk as usize >= p.prompt_ids.len() - 32,
        "{disk} of {}",
        p.prompt_ids.len()
    );
    let groups = eng.pool().groups().groups.len();
    assert!(groups > 1);
    // Every group's blocks of the window were read (full groups: every block).
    assert!(eng.offload_stats().unwrap().blocks_read > disk / 16);
}

/// Each `.kvb` file's blocks as (path, n, index in the file, own hash, parent hash), from
/// the file format's header and entries ([`nanollm::kv::offload::format`]).
fn kvb_entries(dir: &Path) -> Vec<(PathBuf, usize, usize, u128, u128)> {
    use nanollm::kv::offload::format::{entry_bytes, HEADER_BYTES};
    let mut out = Vec::new();
    for path in kvb_files(dir) {
        let b = std::fs::read(&path).unwrap();
        let n = u32::from_le_bytes(b[36..40].try_into().unwrap()) as usize;
        let eb = entry_bytes(u32::from_le_bytes(b[32..36].try_into().unwrap()));
        for i in 0..n {
            let e = &b[HEADER_BYTES + i * eb..];
            let hash = u128::from_le_bytes(e[..16].try_into().unwrap());
            let parent = u128::from_le_bytes(e[16..32].try_into().unwrap());
            out.push((path.clone(), n, i, hash, parent));
        }
    }
    out
}

/// A file with one damaged block, read after a restart: the good blocks before the bad one
/// are served from disk and counted as disk hits, the file's good blocks the pool read
/// are written again, so the next restart hits the whole prompt again.
#[test]
fn a_damaged_block_costs_only_itself_and_its_hits_are_counted() {
    use nanollm::kv::offload::format::data_offset;
    let m = common::model();
    let cache = CacheConfig::default();
    let dir = tempfile::tempdir().unwrap();
    let tier = offload(dir.path(), "f16");
    let p = common::greedy_request(
        m,
        &format!("{}Question: what is a buoy?", system()),
        8,
        cache,
    );
    let want = common::alone(m, &p);
    let full = (p.prompt_ids.len() - 1) / 16;
    let new = || LlmEngine::new(&m.decoder, &m.tokenizer, config(cache, 30, 400, Some(tier)));
    let mut eng = new().unwrap();
    assert_eq!(run(&mut eng, &p).generation.tokens, want, "miss");
    let block_bytes = eng.pool().block_bytes() as u64;
    drop(eng);
    // The prompt's chain, block by block: (file, blocks in it, index in it).
    let entries = kvb_entries(dir.path());
    let mut chain = Vec::new();
    let mut parent = nanollm::kv::ROOT_HASH;
    while let Some(e) = entries.iter().find(|e| e.4 == parent) {
        chain.push(e.clone());
        parent = e.3;
    }
    assert_eq!(chain.len(), full, "{} blocks on disk", entries.len());
    // Damage the last block of the prompt's file holding the most blocks: the ones before
    // it in that file are good and read before it.
    let (path, n, _, _, _) = chain.iter().max_by_key(|e| e.1).unwrap().clone();
    let bad = chain.iter().rposition(|e| e.0 == path).unwrap();
    let first_in_file = chain.iter().position(|e| e.0 == path).unwrap();
    assert!(n >= 2 && bad > first_in_file, "{n} blocks in the file");
    let mut b = std::fs::read(&path).unwrap();
    let g = nanollm::kv::offload::format::Geometry {
        fingerprint: 0,
        block_bytes,
        block_size: 16,
    };
    b[data_offset(&g, n, chain[bad].2) as usize + 7] ^= 0x40;
    std::fs::write(&path, &b).unwrap();
    // A restart reads blocks 0..bad from disk, fails on `bad`, prefills the rest.
    let mut eng = new().unwrap();
    let f = run(&mut eng, &p);
    assert_eq!(f.generation.tokens, want, "after the damaged block");
    let t = eng.offload_stats().unwrap();
    eprintln!(
        "damaged block {bad} of {full}: served {} tokens, disk hits {:?}, blocks read {}, rejected {}",
        f.cached_prompt_tokens,
        hits(&eng),
        t.blocks_read,
        t.files_rejected
    );
    assert_eq!(t.files_rejected, 1);
    assert_eq!(f.cached_prompt_tokens, bad * 16);
    assert_eq!(hits(&eng), (0, bad as u64 * 16), "every disk hit counted");
    eng.flush_offload();
    drop(eng);
    // The next restart finds every block again.
    let mut eng = new().unwrap();
    let f = run(&mut eng, &p);
    assert_eq!(f.generation.tokens, want, "the restart after");
    eprintln!("next restart: disk hits {:?}", hits(&eng));
    assert_eq!(
        hits(&eng),
        (0, full as u64 * 16),
        "blocks were not written again"
    );
}

fn batch_file(dir: &Path) -> PathBuf {
    let lines: Vec<String> = ["tides", "harbours", "anchors"]
        .iter()
        .map(|q| {
            serde_json::json!({"prompt": format!("{}Question: tell me about {q}.", system()), "max_tokens": 8, "temperature": 0})
                .to_string()
        })
        .collect();
    let f = dir.join("in.jsonl");
    std::fs::write(&f, lines.join("\n") + "\n").unwrap();
    f
}

/// run-batch's token ids per line, and its stderr.
fn run_batch(
    input: &Path,
    extra: &[&str],
    env: Option<(&str, &str)>,
) -> (Option<Vec<serde_json::Value>>, String) {
    let mut cmd = common::nanollm();
    cmd.args(["run-batch", "-i"]).arg(input).args(extra);
    if let Some((k, v)) = env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return (None, stderr);
    }
    let ids = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["token_ids"].clone())
        .collect();
    (Some(ids), stderr)
}

fn kvb_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "kvb"))
        .collect();
    v.sort();
    v
}

/// `kill -9` in the middle of writing a file (the fault-injection point aborts the process
/// there), then a restart: the same outputs, the partial file removed, nothing rejected;
/// damaged files: a warning, a miss, the same outputs.
#[test]
fn a_crash_mid_write_and_damaged_files_never_change_outputs() {
    let work = tempfile::tempdir().unwrap();
    let input = batch_file(work.path());
    let (want, _) = run_batch(&input, &[], None);
    let want = want.expect("reference run");
    let dir = work.path().join("kv");
    let d = dir.to_str().unwrap();
    let (crashed, stderr) = run_batch(
        &input,
        &["--kv-offload-dir", d],
        Some(("NANOLLM_OFFLOAD_FAULT", "abort-mid-write")),
    );
    assert!(crashed.is_none(), "the fault point did not abort: {stderr}");
    let partial: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
        .collect();
    assert_eq!(partial.len(), 1, "the crash left no partial file");
    let (got, stderr) = run_batch(&input, &["--kv-offload-dir", d], None);
    assert_eq!(got.as_ref(), Some(&want), "{stderr}");
    assert!(
        !partial[0].path().exists(),
        "the dead writer's partial file stays"
    );
    assert!(!stderr.contains("warning"), "{stderr}");
    // Warm: the second run read blocks back; the outputs are the same.
    let (got, stderr) = run_batch(&input, &["--kv-offload-dir", d], None);
    assert_eq!(got.as_ref(), Some(&want));
    assert!(stderr.contains(" from disk ("), "{stderr}");
    assert!(!stderr.contains(", 0 from disk"), "no disk hit: {stderr}");
    // Damage every file: truncate one, flip a data byte of another, a foreign file in our
    // name; each is skipped with a warning and the outputs stay.
    let files = kvb_files(&dir);
    assert!(files.len() >= 3, "{files:?}");
    let b = std::fs::read(&files[0]).unwrap();
    std::fs::write(&files[0], &b[..b.len() / 2]).unwrap();
    for f in &files[1..] {
        let mut b = std::fs::read(f).unwrap();
        let n = b.len();
        b[n - 100] ^= 0x40;
        std::fs::write(f, &b).unwrap();
    }
    let foreign = files[0].with_file_name(format!(
        "{}-1-1-9.kvb",
        files[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .split('-')
            .next()
            .unwrap()
    ));
    std::fs::write(&foreign, b"NLKVOFF1 but nothing after").unwrap();
    let (got, stderr) = run_batch(&input, &["--kv-offload-dir", d], None);
    assert_eq!(got.as_ref(), Some(&want), "{stderr}");
    assert!(
        stderr.contains("warning: --kv-offload-dir") && stderr.contains("skipped and removed"),
        "{stderr}"
    );
    assert!(!foreign.exists());
}

/// GET (`body` None) or POST JSON to `url`; the response's body.
fn http(url: &str, body: Option<&serde_json::Value>) -> String {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let c = reqwest::Client::new();
        let r = match body {
            Some(b) => c
                .post(url)
                .header("content-type", "application/json")
                .body(b.to_string()),
            None => c.get(url),
        };
        r.send().await.expect("request").text().await.expect("body")
    })
}

/// SIGTERM `s` and wait for it to exit 0.
fn terminate(mut s: common::server::Server) {
    let pid = s.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let t0 = std::time::Instant::now();
    loop {
        if let Some(st) = s.child.try_wait().expect("wait") {
            assert!(st.success(), "{st:?}");
            return;
        }
        assert!(t0.elapsed().as_secs() < 60, "the server did not exit");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A server restarted after SIGTERM serves a warm prefix from disk: same text, the usage's
/// cached tokens, and /metrics counting disk hits apart from pool hits.
#[test]
fn a_server_restarts_warm_after_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let body = serde_json::json!({
        "prompt": format!("{}Question: what is a tide?", system()),
        "max_tokens": 8, "temperature": 0
    });
    let ask = |s: &common::server::Server| -> serde_json::Value {
        serde_json::from_str(&http(&s.url("/v1/completions"), Some(&body))).expect("json")
    };
    let s = common::server::Server::start(&["--kv-offload-dir", d]);
    let first = ask(&s);
    terminate(s);
    assert_eq!(
        first["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "{first}"
    );
    let s = common::server::Server::start(&["--kv-offload-dir", d]);
    let second = ask(&s);
    assert_eq!(second["choices"][0]["text"], first["choices"][0]["text"]);
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 320, "{second}");
    let metrics = http(&s.url("/metrics"), None);
    let value = |name: &str| -> u64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing: {metrics}"))
    };
    assert_eq!(value("nanollm_prefix_cache_disk_hits_total"), cached);
    assert_eq!(value("nanollm_prefix_cache_hits_total"), 0);
    assert!(value("nanollm_kv_offload_bytes_total{direction=\"read\"}") > 0);
}

/// Bad flags: one line naming the flag, nothing run.
#[test]
fn bad_offload_flags_are_refused_by_name() {
    let work = tempfile::tempdir().unwrap();
    let input = batch_file(work.path());
    let i = input.to_str().unwrap();
    let d = work.path().join("kv");
    let d = d.to_str().unwrap();
    common::fails_with(
        &[
            "run-batch",
            "-i",
            i,
            "--kv-offload-dir",
            d,
            "--kv-offload-size",
            "lots",
        ],
        "--kv-offload-size",
    );
    common::fails_with(
        &[
            "run-batch",
            "-i",
            i,
            "--kv-offload-dir",
            d,
            "--kv-offload-size",
            "1KiB",
        ],
        "smaller than one block's file",
    );
    common::fails_with(
        &["run-batch", "-i", i, "--kv-offload-dir", i],
        "not a directory",
    );
    // The output named as the directory: refused before the directory is made.
    common::fails_with(
        &["run-batch", "-i", i, "-o", d, "--kv-offload-dir", d],
        "the same path as --kv-offload-dir",
    );
    assert!(!work.path().join("kv").exists());
    let dangling = work.path().join("dangling");
    std::os::unix::fs::symlink(work.path().join("gone"), &dangling).unwrap();
    common::fails_with(
        &[
            "run-batch",
            "-i",
            i,
            "--kv-offload-dir",
            dangling.to_str().unwrap(),
        ],
        "a symbolic link to a missing directory",
    );
    common::fails_with(
        &[
            "run-batch",
            "-i",
            i,
            "--kv-offload-dir",
            d,
            "--no-enable-prefix-caching",
        ],
        "drop --no-enable-prefix-caching",
    );
    let out = common::nanollm()
        .args(["run-batch", "-i", i, "--kv-offload-size", "1GiB"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--kv-offload-dir"));
}
