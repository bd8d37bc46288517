//! The MLA figures the commands print on the tiny V2-like folder: `bench --mla-path`'s
//! roofline counts each path's decode work (the expanded path re-expands every cached latent
//! and writes and reads f32 K and V), and `generate --show-stats` prints the latent's bytes
//! per token beside an MHA and a GQA-8 cache of the same model.
use super::tiny::{write_folder, Shape};
use serde_json::Value;

fn nanollm() -> std::process::Command {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("nanollm"))
}

/// The decode (FLOPs, bytes) of `bench --mla-path path` on `dir`, 16-token prompt, 4 tokens.
fn decode_work(dir: &std::path::Path, path: &str) -> (f64, f64) {
    let out = nanollm()
        .args([
            "bench",
            "--compare",
            "kv-cache",
            "--prompt-len",
            "16",
            "--gen-len",
            "4",
        ])
        .args([
            "--runs",
            "1",
            "--warmup",
            "0",
            "--json",
            "-",
            "--mla-path",
            path,
            "-m",
        ])
        .arg(dir)
        .output()
        .expect("run nanollm bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["settings"]["mla_path"], path);
    let d = &doc["roofline"]["points"][0]["decode"];
    (
        d["flops"].as_f64().expect("flops"),
        d["bytes"].as_f64().expect("bytes"),
    )
}

#[test]
fn bench_counts_each_mla_path_s_decode_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_folder(dir.path(), &Shape::v2(), 58);
    let (fe, be) = decode_work(dir.path(), "expanded");
    let (fa, ba) = decode_work(dir.path(), "absorbed");
    // Mean keys 16 + 4 / 2 = 18, 3 layers, 4 heads; per key and layer: expanded 2·4·64 +
    // 2·4·16 = 640 FLOPs plus the expansion 2·4·(32 + 16)·64 = 24,576; absorbed 2·4·(64 + 32)
    // + 2·4·64 = 1,280. Expanded bytes add 2·4·(64 + 16)·4 = 2,560 per key and layer.
    assert_eq!(fe - fa, ((640 + 24_576 - 1_280) * 18 * 3) as f64);
    assert_eq!(be - ba, (2_560 * 18 * 3) as f64);
}

#[test]
fn show_stats_prints_the_latent_beside_mha_and_gqa() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_folder(dir.path(), &Shape::v2(), 58);
    let out = nanollm()
        .args(["generate", "w5 w6 w7", "-n", "3", "--show-stats", "-m"])
        .arg(dir.path())
        .output()
        .expect("run nanollm generate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("KV latent (MLA)"))
        .unwrap_or_else(|| panic!("no MLA line in {err}"));
    // 3 layers × (64 + 32) values × 2 bytes; MHA 3 × 2 × 4 heads × 16 × 2 bytes; no GQA-8
    // figure for a model of 4 heads (it would equal MHA's).
    assert!(
        line.ends_with("64 + 32 values per layer (f16): 576 bytes per token; an MHA cache (4 heads × 16 × 2) would hold 768 (1.3×)"),
        "{line}"
    );
}

/// `kv-size` on a deepseek2 GGUF: the latent's bytes, the MHA baseline of heads ×
/// v_head_dim (as for config.json and `--show-stats`), and bad MLA keys refused by name as
/// the loader refuses them.
#[test]
fn kv_size_reads_a_deepseek_gguf_as_the_loader_does() {
    use candle_core::quantized::gguf_file::Value as G;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Shape::v2();
    let w = write_folder(&dir.path().join("folder"), &s, 58);
    let kv_size = |path: &std::path::Path| {
        nanollm()
            .args(["kv-size", "--kv-cache-dtype", "f16", "--json", "-m"])
            .arg(path)
            .output()
            .expect("run kv-size")
    };
    let good = dir.path().join("good.gguf");
    super::tiny::write_gguf(&good, &s, &w, false, &[], &[]);
    let out = kv_size(&good);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    // 3 layers × 2 × 4 heads × v_head_dim 16 × 2 bytes.
    assert_eq!(
        doc["as_if_mha_bytes_per_token"],
        3 * 2 * 4 * 16 * 2,
        "{doc}"
    );
    for (key, value, want) in [
        (
            "deepseek2.attention.kv_lora_rank",
            G::U32(0),
            "deepseek2.attention.kv_lora_rank is 0",
        ),
        (
            "deepseek2.rope.dimension_count",
            G::U32(31),
            "deepseek2.rope.dimension_count is 31",
        ),
        (
            "deepseek2.attention.kv_lora_rank",
            G::U32(u32::MAX),
            "deepseek2.attention.kv_lora_rank is 4294967295",
        ),
    ] {
        let bad = dir.path().join("bad.gguf");
        super::tiny::write_gguf(&bad, &s, &w, false, &[(key, value)], &[]);
        let out = kv_size(&bad);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{key} accepted");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(want), "{err}");
    }
}
