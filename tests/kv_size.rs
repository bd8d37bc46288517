//! `nanollm kv-size` end to end: published figures, every attention kind, and bad input.
use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;
use std::path::Path;

fn kv_size() -> Command {
    let mut cmd = Command::cargo_bin("nanollm").unwrap();
    cmd.arg("kv-size");
    cmd
}

/// Run `kv-size ARGS --json` and parse what it printed.
fn json(args: &[&str]) -> Value {
    let out = kv_size()
        .args(args)
        .arg("--json")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).unwrap()
}

/// `rows[i].field` as u64.
fn row(v: &Value, i: usize, field: &str) -> u64 {
    v["rows"][i][field]
        .as_u64()
        .unwrap_or_else(|| panic!("rows[{i}].{field} in {v}"))
}

/// Run `kv-size ARGS`, expect failure with one `error:` line that contains `needle`.
fn fails(args: &[&str], needle: &str) {
    let out = kv_size().args(args).assert().failure().get_output().clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: expected one line, got {stderr}");
    assert!(lines[0].starts_with("error: "), "{args:?}: {stderr}");
    assert!(
        lines[0].contains(needle),
        "{args:?}: {stderr} lacks {needle:?}"
    );
    assert_eq!(out.status.code(), Some(1), "{args:?}");
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kv")
        .join(name)
        .display()
        .to_string()
}

// ------------------------------------------------------------------ published figures

#[test]
fn qwen3_32b_at_128k_is_32_gib_and_an_eighth_of_plain_mha() {
    let v = json(&["--model", "qwen3-32b", "--seq", "128k"]);
    assert_eq!(row(&v, 0, "seq"), 131_072);
    assert_eq!(v["rows"][0]["seq_input"], "128k");
    assert_eq!(v["bytes_per_token"], 262_144);
    assert_eq!(row(&v, 0, "kv_bytes"), 34_359_738_368);
    assert_eq!(row(&v, 0, "total_bytes"), 34_359_738_368);
    // Plain MHA keeps all 64 attention heads × head_dim 128 (not hidden_size 5120):
    // 64 / 8 = eight times the GQA cache.
    assert_eq!(v["as_if_mha_bytes_per_token"], 2 * 64 * 64 * 128 * 2);
    assert_eq!(row(&v, 0, "as_if_mha_bytes"), 8 * 34_359_738_368);
    assert_eq!(v["dtype"], "bf16");
    assert_eq!(v["dtype_is_default"], true);
}

/// For an MLA model the MHA baseline is the DeepSeek-V2 paper's 2 · n_h · d_h · l values per
/// token (d_h = v_head_dim 128), not 2 · hidden_size · l: DeepSeek-V3, 128 heads × 128 × 61
/// layers in bf16 = 3,997,696 bytes, 56.9× its 70,272-byte latent cache (was 2 · 7168 · 61 ·
/// 2 = 1,748,992, 24.9×).
#[test]
fn as_if_mha_of_an_mla_model_is_heads_times_v_head_dim() {
    let v = json(&["--model", "deepseek-v3", "--seq", "1"]);
    assert_eq!(v["bytes_per_token"], 61 * (512 + 64) * 2);
    assert_eq!(v["as_if_mha_bytes_per_token"], 2 * 61 * 128 * 128 * 2);
    kv_size()
        .args(["--model", "deepseek-v3", "--seq", "1"])
        .assert()
        .success()
        .stdout(predicate::str::contains("128 heads · v_head_dim 128"))
        .stdout(predicate::str::contains("56.89× this cache"));
}

#[test]
fn as_if_mha_is_heads_over_kv_heads_and_per_gpu_under_tp() {
    kv_size()
        .args(["--model", "qwen3-32b", "--seq", "128k"])
        .assert()
        .success()
        .stdout(predicate::str::contains("64 heads · head_dim 128"))
        .stdout(predicate::str::contains("8.00× this cache"));
    let tp4 = json(&["--model", "qwen3-32b", "--seq", "128k", "--tp", "4"]);
    assert_eq!(tp4["bytes_per_token"], 262_144 / 4);
    assert_eq!(tp4["as_if_mha_bytes_per_token"], 8 * 262_144 / 4);
    assert_eq!(
        row(&tp4, 0, "as_if_mha_bytes"),
        8 * row(&tp4, 0, "kv_bytes")
    );
    kv_size()
        .args(["--model", "qwen3-32b", "--seq", "128k", "--tp", "4"])
        .assert()
        .success()
        .stdout(predicate::str::contains("64/4 heads"))
        .stdout(predicate::str::contains("8.00× this cache"))
        .stdout(predicate::str::contains("until the windows fill").not());
    // Plain MHA has no sliding windows: with windows the header's ratio is per token only
    // until they fill, and says so (Mistral 7B: 4× per token, 128× at 128k in the table).
    kv_size()
        .args(["--model", "mistral-7b-v0.1", "--seq", "128k"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "4.00× this cache, per token until the windows fill (no windows in plain MHA)",
        ))
        .stdout(predicate::str::contains("64.00 GiB"));
}

/// --weights and --params only size the weights for --gpu-mem: alone they are refused, not
/// ignored.
#[test]
fn weights_without_gpu_mem_are_refused() {
    fails(&["--model", "qwen3-32b", "--weights", "10GiB"], "--gpu-mem");
    fails(&["--model", "qwen3-32b", "--params", "8B"], "--gpu-mem");
}

#[test]
fn kv_heads_that_do_not_divide_the_heads_are_refused() {
    fails(
        &[
            "--layers",
            "2",
            "--heads",
            "8",
            "--kv-heads",
            "16",
            "--head-dim",
            "64",
        ],
        "--kv-heads 16 exceeds --heads 8",
    );
    fails(
        &[
            "--layers",
            "2",
            "--heads",
            "12",
            "--kv-heads",
            "8",
            "--head-dim",
            "64",
        ],
        "--heads 12 is not a multiple of --kv-heads 8",
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    let write = |heads: u32, kv: u32| {
        let text = format!(
            r#"{{"num_hidden_layers": 2, "num_attention_heads": {heads}, "num_key_value_heads": {kv}, "head_dim": 128}}"#
        );
        std::fs::write(&cfg, text).unwrap();
        cfg.display().to_string()
    };
    fails(
        &["--model", &write(8, 16), "--seq", "4k"],
        "num_key_value_heads 16 exceeds num_attention_heads 8",
    );
    fails(
        &["--model", &write(12, 8), "--seq", "4k"],
        "num_attention_heads 12 is not a multiple of num_key_value_heads 8",
    );
    json(&["--model", &write(12, 4), "--seq", "4k"]);
}

#[test]
fn qwen3_32b_table_prints_the_resolved_count_and_exact_bytes() {
    kv_size()
        .args(["--model", "Qwen3-32B", "--seq", "128k"])
        .assert()
        .success()
        .stdout(predicate::str::contains("131,072 (128k)"))
        .stdout(predicate::str::contains("34,359,738,368"))
        .stdout(predicate::str::contains("32.00 GiB (34.36 GB)"))
        .stdout(predicate::str::contains("262,144 bytes"))
        .stdout(predicate::str::contains("2,097,152 bytes per token"))
        .stdout(predicate::str::contains("Qwen/Qwen3-32B/config.json"));
}

#[test]
fn the_same_config_read_from_a_file_agrees_with_the_preset() {
    let v = json(&[
        "--model",
        &fixture("qwen3_32b_config.json"),
        "--seq",
        "131072",
    ]);
    assert_eq!(row(&v, 0, "kv_bytes"), 34_359_738_368);
}

#[test]
fn qwen3_32b_without_gqa_is_five_times_as_large() {
    let gqa = json(&[
        "--layers",
        "64",
        "--kv-heads",
        "8",
        "--head-dim",
        "128",
        "--seq",
        "128k",
    ]);
    let mha = json(&[
        "--layers", "64", "--heads", "40", "--hidden", "5120", "--seq", "128k",
    ]);
    assert_eq!(row(&gqa, 0, "kv_bytes"), 34_359_738_368);
    assert_eq!(row(&mha, 0, "kv_bytes"), 5 * 34_359_738_368);
}

#[test]
fn qwen2_5_7b_batch_8_at_32k() {
    let v = json(&["--model", "qwen2.5-7b", "--seq", "32k", "--batch", "8"]);
    assert_eq!(v["bytes_per_token"], 57_344);
    assert_eq!(row(&v, 0, "kv_bytes"), 15_032_385_536);
}

#[test]
fn llama_2_70b_at_4096_is_1_25_gib() {
    let v = json(&["--model", "llama-2-70b", "--seq", "4096"]);
    assert_eq!(row(&v, 0, "kv_bytes"), 1_342_177_280);
    kv_size()
        .args(["--model", "llama-2-70b", "--seq", "4096"])
        .assert()
        .success()
        .stdout(predicate::str::contains("1.25 GiB"));
}

#[test]
fn several_seq_values_give_one_row_each() {
    let v = json(&["--model", "llama-3-8b", "--seq", "4k,32k,128k"]);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    // 2 · 32 layers · 8 KV heads · 128 · 2 bytes = 131,072 bytes per token.
    for (i, t) in [4096u64, 32_768, 131_072].into_iter().enumerate() {
        assert_eq!(row(&v, i, "seq"), t);
        assert_eq!(row(&v, i, "kv_bytes"), t * 131_072);
    }
}

#[test]
fn default_seq_is_max_position_embeddings() {
    let v = json(&["--model", "smollm2-135m"]);
    assert_eq!(row(&v, 0, "seq"), 8192);
    // SmolLM2-135M: 2 · 30 · 3 · 64 · 2 = 23,040 bytes per token.
    assert_eq!(row(&v, 0, "kv_bytes"), 8192 * 23_040);
}

// ------------------------------------------------------------------ attention kinds

#[test]
fn mla_counts_the_latent_once() {
    let v3 = json(&["--model", "deepseek-v3", "--seq", "1"]);
    assert_eq!(row(&v3, 0, "kv_bytes"), 61 * (512 + 64) * 2);
    let lite = json(&["--model", "deepseek-v2-lite", "--seq", "1"]);
    assert_eq!(row(&lite, 0, "kv_bytes"), 27 * (512 + 64) * 2);
    assert_eq!(lite["model"]["groups"][0]["kind"], "mla");
}

#[test]
fn mistral_7b_windows_every_layer_at_4096() {
    let v = json(&["--model", "mistral-7b-v0.1", "--seq", "4k,32k"]);
    assert_eq!(row(&v, 0, "kv_bytes"), 32 * 4096 * 4096);
    assert_eq!(row(&v, 1, "kv_bytes"), 32 * 4096 * 4096);
}

#[test]
fn gemma_2_alternates_local_and_global() {
    let v = json(&["--model", "gemma-2-9b", "--seq", "8k"]);
    let per_layer_token = 2 * 8 * 256 * 2;
    assert_eq!(
        row(&v, 0, "kv_bytes"),
        21 * 4096 * per_layer_token + 21 * 8192 * per_layer_token
    );
}

#[test]
fn gemma_3_has_five_local_layers_per_global_one() {
    let v = json(&["--model", "gemma-3-27b", "--seq", "128k"]);
    let groups = v["model"]["groups"].as_array().unwrap();
    let count = |kind: &str| {
        groups
            .iter()
            .filter(|g| g["kind"] == kind)
            .map(|g| g["layers"].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!(count("sliding_window"), 52);
    assert_eq!(count("full_attention"), 10);
    let per_layer_token = 2 * 16 * 128 * 2;
    assert_eq!(
        row(&v, 0, "kv_bytes"),
        52 * 1024 * per_layer_token + 10 * 131_072 * per_layer_token
    );
    kv_size()
        .args(["--model", "gemma-3-27b", "--seq", "128k"])
        .assert()
        .success()
        .stdout(predicate::str::contains("By layer kind"))
        .stdout(predicate::str::contains("sliding window 1,024"));
}

#[test]
fn layer_types_in_a_config_dir() {
    let v = json(&["--model", &fixture("gemma3_layer_types"), "--seq", "4096"]);
    assert_eq!(row(&v, 0, "kv_bytes"), 7 * 512 * 1024 + 4096 * 1024);
}

#[test]
fn hybrid_layers_hold_no_kv_but_a_constant_state() {
    let v = json(&["--model", "qwen3-next-80b-a3b", "--seq", "1k,256k"]);
    // 12 full-attention layers of 2 KV heads × 256; 36 linear-attention layers.
    assert_eq!(row(&v, 0, "kv_bytes"), 12 * 2 * 2 * 256 * 2 * 1024);
    // Gated DeltaNet state: conv (2·16·128 + 32·128) · 3 + recurrent 32 · 128 · 128, bf16.
    let state = 36 * ((2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128) * 2;
    assert_eq!(row(&v, 0, "state_bytes"), state);
    assert_eq!(row(&v, 1, "state_bytes"), state);
    assert_eq!(row(&v, 0, "total_bytes"), row(&v, 0, "kv_bytes") + state);

    let jamba = json(&["--model", "jamba-v0.1", "--seq", "1"]);
    assert_eq!(row(&jamba, 0, "kv_bytes"), 4 * 2 * 8 * 128 * 2);
    // Mamba: d_inner 8192, conv 8192 · 3 + SSM 8192 · 16 values per layer, 28 layers, bf16.
    assert_eq!(
        row(&jamba, 0, "state_bytes"),
        28 * (8192 * 3 + 8192 * 16) * 2
    );
}

#[test]
fn falcon_7b_has_one_kv_head() {
    let v = json(&["--model", "falcon-7b", "--seq", "2048"]);
    assert_eq!(v["bytes_per_token"], 2 * 32 * 64 * 2);
}

#[test]
fn quantized_dtypes_count_their_block_scales() {
    // q8_0: each 128-value head row is 4 blocks of 34 bytes.
    let v = json(&["--model", "qwen3-32b", "--seq", "1", "--dtype", "q8_0"]);
    assert_eq!(v["bytes_per_token"], 2 * 64 * 8 * 4 * 34);
    let v = json(&["--model", "qwen3-32b", "--seq", "1", "--dtype", "q4_0"]);
    assert_eq!(v["bytes_per_token"], 2 * 64 * 8 * 4 * 18);
    let v = json(&["--model", "qwen3-32b", "--seq", "1", "--dtype", "fp8"]);
    assert_eq!(v["bytes_per_token"], 131_072);
}

#[test]
fn tensor_parallel_splits_then_replicates_heads() {
    let one = json(&["--model", "llama-3.1-70b", "--seq", "8k"]);
    let tp4 = json(&["--model", "llama-3.1-70b", "--seq", "8k", "--tp", "4"]);
    assert_eq!(row(&tp4, 0, "kv_bytes") * 4, row(&one, 0, "kv_bytes"));
    assert_eq!(
        row(&tp4, 0, "total_bytes_all_gpus"),
        row(&one, 0, "kv_bytes")
    );
    // 8 KV heads on 16 GPUs: each GPU holds one head, so the total doubles.
    let tp16 = json(&["--model", "llama-3.1-405b", "--seq", "8k", "--tp", "16"]);
    let base = json(&["--model", "llama-3.1-405b", "--seq", "8k"]);
    assert_eq!(row(&tp16, 0, "kv_bytes") * 8, row(&base, 0, "kv_bytes"));
    fails(
        &["--model", "llama-3-8b", "--seq", "8k", "--tp", "3"],
        "tensor-parallel degree 3",
    );
}

#[test]
fn paging_rounds_each_sequence_up_to_whole_blocks() {
    let v = json(&[
        "--model",
        "llama-3-8b",
        "--seq",
        "100",
        "--block-size",
        "16",
        "--batch",
        "2",
    ]);
    assert_eq!(row(&v, 0, "kv_bytes"), 2 * 112 * 131_072);
}

#[test]
fn gpu_mem_says_how_many_sequences_fit() {
    // Llama-3-8B: 8.03B parameters × 2 bytes; 131,072 bytes per token.
    let v = json(&["--model", "llama-3-8b", "--seq", "8k", "--gpu-mem", "80GiB"]);
    let free = 80u64 * (1 << 30) - 8_030_000_000 * 2;
    assert_eq!(v["weights_bytes"], 16_060_000_000u64);
    assert_eq!(v["rows"][0]["fit"]["free_bytes"], free);
    assert_eq!(v["rows"][0]["fit"]["sequences"], free / (8192 * 131_072));
    assert_eq!(v["rows"][0]["fit"]["max_tokens"], free / 131_072);
    let v = json(&[
        "--layers",
        "32",
        "--kv-heads",
        "8",
        "--head-dim",
        "128",
        "--seq",
        "8k",
        "--gpu-mem",
        "80GB",
        "--weights",
        "16GB",
    ]);
    assert_eq!(v["rows"][0]["fit"]["free_bytes"], 64_000_000_000u64);
    // Every layer windowed: one sequence can grow without bound.
    let v = json(&[
        "--model",
        "mistral-7b-v0.1",
        "--seq",
        "32k",
        "--gpu-mem",
        "24GiB",
    ]);
    assert_eq!(v["rows"][0]["fit"]["max_tokens"], Value::Null);
    fails(
        &["--model", "llama-3-8b", "--seq", "8k", "--gpu-mem", "80G"],
        "GiB",
    );
    fails(
        &["--model", "llama-3-70b-nope", "--seq", "8k"],
        "unknown model",
    );
    fails(
        &[
            "--model",
            "llama-3.1-405b",
            "--seq",
            "8k",
            "--gpu-mem",
            "80GiB",
        ],
        "weights",
    );
}

#[test]
fn list_shows_every_preset_with_its_source() {
    let out = kv_size()
        .arg("--list")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    for name in [
        "qwen3-0.6b",
        "qwen3-8b",
        "qwen3-32b",
        "qwen3-30b-a3b",
        "qwen2.5-0.5b",
        "qwen2.5-7b",
        "llama-2-7b",
        "llama-2-70b",
        "llama-3-8b",
        "llama-3.1-70b",
        "llama-3.1-405b",
        "mistral-7b-v0.1",
        "mixtral-8x7b",
        "gemma-2-9b",
        "gemma-3-27b",
        "phi-3-mini",
        "deepseek-v2-lite",
        "deepseek-v3",
        "smollm2-135m",
        "tinyllama-1.1b",
        "falcon-7b",
    ] {
        assert!(out.contains(name), "--list lacks {name}");
    }
    assert!(out.contains("Qwen/Qwen3-30B-A3B/config.json"));
    let v: Value = serde_json::from_slice(
        &kv_size()
            .args(["--list", "--json"])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .unwrap();
    assert!(v.as_array().unwrap().len() >= 20);
}

#[test]
fn help_explains_k_and_units() {
    kv_size()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "nanollm kv-size --model qwen3-32b --seq 128k",
        ))
        .stdout(predicate::str::contains("131,072"))
        .stdout(predicate::str::contains("GiB = 2^30"));
}

/// An error line that cannot be written (stderr on a full device; a closed pipe fails the
/// same way) still ends with the error's exit code, not a panic (101).
#[cfg(target_os = "linux")]
#[test]
fn a_failed_write_to_stderr_is_not_a_panic() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("nanollm"))
        .args(["kv-size", "--model", "qwen3-32b", "--seq", "bogus"])
        .stderr(full)
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert_ne!(out.status.code(), Some(101), "panicked: {:?}", out.status);
}

/// A large config at three lengths with a GPU budget, TP and FP8 weights: every row is
/// answered from the config alone (no weights are read, so this needs no model). Speed is
/// not asserted here (these machines are noisy); it is a config walk.
#[test]
fn deepseek_v3_with_tp_fp8_and_a_gpu_budget_answers_every_length() {
    let v = json(&[
        "--model",
        "deepseek-v3",
        "--seq",
        "4k,32k,128k",
        "--gpu-mem",
        "141GB",
        "--tp",
        "8",
        "--weight-dtype",
        "fp8",
    ]);
    let rows = v["rows"].as_array().map(|r| r.len()).unwrap_or(0);
    assert_eq!(rows, 3, "{v}");
}

// ------------------------------------------------------------------ GGUF and the hub cache

#[test]
fn gguf_metadata_without_weights() {
    use candle_core::quantized::gguf_file::{self, Value as G};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let md = [
        ("general.architecture", G::String("llama".into())),
        ("llama.block_count", G::U32(30)),
        ("llama.attention.head_count", G::U32(9)),
        ("llama.attention.head_count_kv", G::U32(3)),
        ("llama.embedding_length", G::U32(576)),
        ("llama.context_length", G::U32(8192)),
    ];
    let refs: Vec<(&str, &G)> = md.iter().map(|(k, v)| (*k, v)).collect();
    let mut f = std::fs::File::create(&path).unwrap();
    gguf_file::write(&mut f, &refs, &[]).unwrap();
    drop(f);
    let p = path.display().to_string();
    let v = json(&["--model", &p, "--seq", "100"]);
    assert_eq!(v["dtype"], "f16");
    assert_eq!(row(&v, 0, "kv_bytes"), 100 * 2 * 30 * 3 * 64 * 2);
    let v = json(&["--model", &p, "--seq", "100", "--dtype", "f32"]);
    assert_eq!(row(&v, 0, "kv_bytes"), 100 * 2 * 30 * 3 * 64 * 4);
    std::fs::write(dir.path().join("bad.gguf"), b"GGUF garbage").unwrap();
    fails(
        &[
            "--model",
            &dir.path().join("bad.gguf").display().to_string(),
            "--seq",
            "1",
        ],
        "bad.gguf",
    );
    // llama.cpp's header checks come first: a zero alignment (candle's reader divided by
    // it and panicked) and a key given twice are named.
    let mut md2: Vec<(&str, G)> = md.to_vec();
    md2.push(("general.alignment", G::U32(0)));
    let refs: Vec<(&str, &G)> = md2.iter().map(|(k, v)| (*k, v)).collect();
    let align0 = dir.path().join("align0.gguf");
    let mut f = std::fs::File::create(&align0).unwrap();
    gguf_file::write(&mut f, &refs, &[]).unwrap();
    drop(f);
    let a = align0.display().to_string();
    fails(
        &["--model", &a, "--seq", "1"],
        "general.alignment is 0: it must be a power of two",
    );
    let mut md3: Vec<(&str, G)> = md.to_vec();
    md3.push(("llama.block_count", G::U32(2)));
    let refs: Vec<(&str, &G)> = md3.iter().map(|(k, v)| (*k, v)).collect();
    let dup = dir.path().join("dup.gguf");
    let mut f = std::fs::File::create(&dup).unwrap();
    gguf_file::write(&mut f, &refs, &[]).unwrap();
    drop(f);
    let d = dup.display().to_string();
    fails(
        &["--model", &d, "--seq", "1"],
        "metadata key llama.block_count appears twice",
    );
}

#[test]
fn hub_id_found_in_the_local_hf_cache() {
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--acme--tiny-llama");
    let snap = repo.join("snapshots").join("abc123");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs").join("main"), "abc123").unwrap();
    std::fs::write(
        snap.join("config.json"),
        r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 256}"#,
    )
    .unwrap();
    std::fs::write(snap.join("model.safetensors"), vec![0u8; 1000]).unwrap();
    let out = kv_size()
        .env("HF_HUB_CACHE", cache.path())
        .args([
            "--model",
            "acme/tiny-llama",
            "--seq",
            "10",
            "--json",
            "--gpu-mem",
            "1MB",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(row(&v, 0, "kv_bytes"), 10 * 2 * 2 * 2 * 64 * 2);
    assert_eq!(v["weights_bytes"], 1000);
}

// ------------------------------------------------------------------ bad input

#[test]
fn bad_seq_values_are_one_line_errors() {
    fails(&["--model", "qwen3-32b", "--seq", "12q"], "--seq '12q'");
    fails(&["--model", "qwen3-32b", "--seq", "-5"], "--seq '-5'");
    fails(&["--model", "qwen3-32b", "--seq", "0"], "at least 1");
    fails(
        &["--model", "qwen3-32b", "--seq", "99999999999999999999"],
        "2^64",
    );
    fails(
        &["--model", "qwen3-32b", "--seq", "18446744073709551615"],
        "overflows 64 bits",
    );
    fails(
        &["--model", "qwen3-32b", "--seq", "131,072"],
        "leading zero",
    );
    fails(&["--model", "qwen3-32b", "--seq", "4k,,8k"], "empty");
}

#[test]
fn bad_batch_values_are_one_line_errors() {
    fails(
        &[
            "--model",
            "qwen3-32b",
            "--seq",
            "128k",
            "--batch",
            "18446744073709551615",
        ],
        "overflows 64 bits",
    );
    fails(
        &[
            "--model",
            "qwen3-32b",
            "--seq",
            "128k",
            "--batch",
            "99999999999999999999",
        ],
        "2^64",
    );
    fails(
        &["--model", "qwen3-32b", "--seq", "128k", "--batch", "0"],
        "--batch",
    );
    fails(
        &["--model", "qwen3-32b", "--seq", "128k", "--batch", "-5"],
        "--batch '-5'",
    );
    fails(
        &["--model", "qwen3-32b", "--seq", "128k", "--dtype", "f12"],
        "--dtype (--kv-cache-dtype) 'f12'",
    );
    // generate's name for the same flag.
    fails(
        &[
            "--model",
            "qwen3-32b",
            "--seq",
            "128k",
            "--kv-cache-dtype",
            "int3",
        ],
        "--dtype (--kv-cache-dtype) 'int3'",
    );
}

#[test]
fn unknown_preset_suggests_the_closest_names() {
    fails(
        &["--model", "qwen3-33b", "--seq", "4k"],
        "did you mean qwen3-32b",
    );
    fails(
        &["--model", "nosuchmodel.json", "--seq", "4k"],
        "no such file",
    );
}

#[test]
fn broken_configs_name_the_missing_field() {
    fails(
        &["--model", &fixture("no_layers"), "--seq", "4k"],
        "no num_hidden_layers",
    );
    fails(
        &[
            "--model",
            &fixture("mla_without_kv_lora_rank.json"),
            "--seq",
            "4k",
        ],
        "has no kv_lora_rank",
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("config.json");
    std::fs::write(&bad, "{ not json").unwrap();
    fails(
        &["--model", &bad.display().to_string(), "--seq", "4k"],
        "not valid JSON",
    );
    std::fs::write(
        &bad,
        r#"{"num_hidden_layers": "many", "num_attention_heads": 8, "hidden_size": 64}"#,
    )
    .unwrap();
    fails(
        &["--model", &bad.display().to_string(), "--seq", "4k"],
        "num_hidden_layers is \"many\"",
    );
}

#[test]
fn no_model_is_an_error_not_a_panic() {
    fails(&["--seq", "4k"], "--model");
    fails(&["--layers", "32", "--seq", "4k"], "--head-dim");
}

// ------------------------------------------------------------------ issue 14: newer layouts

/// gemma-3n-E4B's text config (google/gemma-3n-E4B-it config.json `text_config`: 35 layers,
/// 2 KV heads, head_dim 256, sliding_window 512, layer_types (4 sliding + 1 full) × 7,
/// num_kv_shared_layers 15): the last 15 layers reuse earlier layers' caches, so only layers
/// 0–19 hold KV — 16 sliding (512 tokens) and 4 full. At 32,768 tokens in bf16:
/// 2 · 2 · 256 · 2 bytes · (4 · 32,768 + 16 · 512) = 285,212,672 bytes (issue 14; counting all
/// 35 layers gave 499,122,176).
#[test]
fn gemma_3n_shared_kv_layers_hold_no_cache() {
    let v = json(&[
        "--model",
        &fixture("gemma3n_e4b_config.json"),
        "--seq",
        "32k",
        "--dtype",
        "bf16",
    ]);
    assert_eq!(row(&v, 0, "kv_bytes"), 285_212_672);
    assert_eq!(row(&v, 0, "state_bytes"), 0);
    let groups = v["model"]["groups"].as_array().unwrap();
    let shared: u64 = groups
        .iter()
        .filter(|g| g["mixer"] == "shared_kv")
        .map(|g| g["layers"].as_u64().unwrap())
        .sum();
    assert_eq!(shared, 15, "{groups:?}");
    kv_size()
        .args([
            "--model",
            &fixture("gemma3n_e4b_config.json"),
            "--seq",
            "32k",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("KV shared with an earlier layer"));
}

/// Llama-4-Scout's text config (meta-llama/Llama-4-Scout-17B-16E config.json `text_config`:
/// 48 layers, 8 KV heads, head_dim 128, attention_chunk_size 8192, `no_rope_layers: []`, so
/// every 4th layer is a global NoPE layer): 36 chunked layers hold at most 8,192 tokens, 12
/// global layers hold all. bf16, 4,096 bytes per token per layer: at 131,072 tokens
/// 12 · 131,072 · 4,096 + 36 · 8,192 · 4,096 = 7,650,410,496 bytes; at 4,096 tokens all 48
/// layers hold 4,096: 805,306,368 (issue 14).
#[test]
fn llama_4_chunked_layers_hold_one_chunk() {
    let v = json(&[
        "--model",
        &fixture("llama4_scout_config.json"),
        "--seq",
        "131072,4096",
        "--dtype",
        "bf16",
    ]);
    assert_eq!(row(&v, 0, "kv_bytes"), 7_650_410_496);
    assert_eq!(row(&v, 1, "kv_bytes"), 805_306_368);
}

/// Llama 4's `no_rope_layers` list (1 = RoPE, chunked; 0 = NoPE, global) and
/// `no_rope_layer_interval`; a list of the wrong length is a one-line error naming it.
#[test]
fn llama_4_no_rope_layers_and_interval() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, extra: Value| {
        let mut cfg = serde_json::json!({"model_type": "llama4_text", "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8,
            "attention_chunk_size": 16});
        for (k, val) in extra.as_object().unwrap() {
            cfg[k] = val.clone();
        }
        let path = dir.path().join(name);
        std::fs::write(&path, cfg.to_string()).unwrap();
        path.display().to_string()
    };
    // bf16: 2 · 1 · 8 · 2 = 32 bytes per token per layer; 100 tokens.
    let listed = write(
        "listed.json",
        serde_json::json!({"no_rope_layers": [1, 0, 0, 1]}),
    );
    let v = json(&["--model", &listed, "--seq", "100", "--dtype", "bf16"]);
    assert_eq!(row(&v, 0, "kv_bytes"), (2 * 16 + 2 * 100) * 32);
    let every2 = write(
        "every2.json",
        serde_json::json!({"no_rope_layer_interval": 2}),
    );
    let v = json(&["--model", &every2, "--seq", "100", "--dtype", "bf16"]);
    assert_eq!(row(&v, 0, "kv_bytes"), (2 * 16 + 2 * 100) * 32);
    let bad = write("bad.json", serde_json::json!({"no_rope_layers": [1, 0]}));
    fails(
        &["--model", &bad, "--seq", "100"],
        "no_rope_layers has 2 entries",
    );
    let shared = write(
        "shared.json",
        serde_json::json!({"num_kv_shared_layers": 4}),
    );
    fails(
        &["--model", &shared, "--seq", "100"],
        "num_kv_shared_layers is 4",
    );
}

/// `--dtype auto` (vLLM's `--kv-cache-dtype auto`, its default, and ours) is the model's
/// 16-bit dtype: bf16 for a bfloat16 config.json, f16 for float16/float32 ones (vLLM runs
/// float32 models in float16) and for a .gguf; it was refused as an unknown dtype.
#[test]
fn dtype_auto_follows_the_models_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    for (torch_dtype, want) in [("bfloat16", "bf16"), ("float16", "f16"), ("float32", "f16")] {
        let text = format!(
            r#"{{"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64, "torch_dtype": "{torch_dtype}"}}"#
        );
        std::fs::write(&cfg, text).unwrap();
        let path = cfg.display().to_string();
        let v = json(&["--model", &path, "--seq", "10", "--dtype", "auto"]);
        assert_eq!(v["dtype"], want, "{torch_dtype}");
        assert_eq!(v["bytes_per_token"], 2 * 2 * 4 * 64 * 2);
        assert_eq!(v["dtype_is_default"], false);
        // Without --dtype, the same (vLLM's default is auto; a bug hunt found a float16
        // config labelled bf16 "for a bf16 model"), under a "default" label that names it.
        let v = json(&["--model", &path, "--seq", "10"]);
        assert_eq!(v["dtype"], want, "{torch_dtype}");
        assert_eq!(v["dtype_is_default"], true);
        kv_size()
            .args(["--model", &path, "--seq", "10"])
            .assert()
            .success()
            .stdout(predicate::str::contains(format!(
                "(default: the model's dtype {torch_dtype} in config.json"
            )));
    }
    // A dtype auto does not follow (int8) falls back to bf16 and says so.
    std::fs::write(
        &cfg,
        r#"{"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64, "torch_dtype": "int8"}"#,
    )
    .unwrap();
    let path = cfg.display().to_string();
    assert_eq!(json(&["--model", &path, "--seq", "10"])["dtype"], "bf16");
    kv_size()
        .args(["--model", &path, "--seq", "10"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "(default: config.json's dtype int8 is not a float dtype vLLM's auto follows; bf16",
        ));
    let v = json(&[
        "--model",
        "qwen3-32b",
        "--seq",
        "1",
        "--kv-cache-dtype",
        "auto",
    ]);
    assert_eq!(v["dtype"], "bf16");
    kv_size()
        .args(["--model", "qwen3-32b", "--seq", "1", "--dtype", "AUTO"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "(auto: as vLLM's --kv-cache-dtype auto",
        ));
}

/// A config.json without `max_position_embeddings` takes its transformers class default
/// (Gemma3TextConfig: 131,072; LlamaConfig: 2,048), named in a note; a Gemma 3 config
/// (whose text_config leaves it out) needed --seq.
#[test]
fn a_missing_max_position_embeddings_takes_the_class_default() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    for (model_type, want) in [
        ("gemma3_text", 131_072u64),
        ("llama", 2048),
        ("mistral", 131_072),
    ] {
        std::fs::write(
            &cfg,
            format!(
                r#"{{"model_type": "{model_type}", "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64}}"#
            ),
        )
        .unwrap();
        let path = cfg.display().to_string();
        let v = json(&["--model", &path]);
        assert_eq!(row(&v, 0, "seq"), want, "{model_type}");
        let out = kv_size().args(["--model", &path]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("max_position_embeddings is not in config.json")
                && text.contains(model_type),
            "{text}"
        );
    }
    std::fs::write(
        &cfg,
        r#"{"model_type": "somethingnew", "num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 64}"#,
    )
    .unwrap();
    fails(
        &["--model", &cfg.display().to_string()],
        "--seq is needed: the model does not give max_position_embeddings",
    );
}
