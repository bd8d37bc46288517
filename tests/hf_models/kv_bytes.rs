//! `kv-size --model <folder>` against the bytes the runtime cache holds, per architecture.
use crate::ours;
use crate::tiny::{self, Arch, Rng, Spec, ALL};
use nanollm::engine::DecodeMode;

/// `nanollm kv-size --model PATH --seq T --kv-cache-dtype DTYPE --json`: rows[0].kv_bytes
/// (PATH a folder or a GGUF).
pub fn kv_size_bytes(dir: &std::path::Path, tokens: usize, dtype: &str) -> u64 {
    let out = assert_cmd::Command::cargo_bin("nanollm")
        .expect("binary")
        .arg("kv-size")
        .arg("--model")
        .arg(dir)
        .args([
            "--seq",
            &tokens.to_string(),
            "--kv-cache-dtype",
            dtype,
            "--json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).expect("kv-size JSON");
    v["rows"][0]["kv_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no rows[0].kv_bytes in {v}"))
}

#[test]
fn kv_size_of_the_folder_equals_the_runtime_cache_for_every_architecture() {
    for arch in ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = Spec::of(arch);
        tiny::write_folder(dir.path(), &spec, 3);
        let model = ours::load(dir.path(), None);
        let prompt = Rng::new(11).tokens(9);
        for mode in [DecodeMode::KvCache, DecodeMode::Naive] {
            let gen = ours::engine_greedy(&model, &prompt, 12, mode);
            let kv = &gen.stats.kv_cache;
            assert_eq!(kv.tokens, prompt.len() + 12 - 1, "{arch:?} {mode:?}");
            // The engine's default KV cache: f16, 2 bytes per value.
            assert_eq!(kv.dtype, "f16");
            let per_token = 2 * spec.layers * spec.kv_heads * spec.head_dim * 2;
            assert_eq!(
                kv.bytes_used,
                (kv.tokens * per_token) as u64,
                "{arch:?} {mode:?}: 2·L·H_kv·head_dim·2 per token"
            );
            let estimate = kv_size_bytes(dir.path(), kv.tokens, kv.dtype);
            eprintln!(
                "{arch:?} {mode:?}: {} tokens, runtime {} bytes, kv-size {estimate} bytes",
                kv.tokens, kv.bytes_used
            );
            assert_eq!(
                estimate, kv.bytes_used,
                "{arch:?} {mode:?}: kv-size vs runtime cache"
            );
        }
    }
}

/// Mistral's sliding window slides (issue 42; it used to cap the context at the window):
/// 100 tokens past a 48-token window, the sliding layers holding only their window's
/// blocks — kv-size's figure for the config.json, unpaged and paged, equals the runtime's.
#[test]
fn mistral_slides_past_its_window_and_holds_what_kv_size_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = Spec::of(Arch::Mistral);
    tiny::write_folder(dir.path(), &spec, 3);
    let model = ours::load(dir.path(), None);
    assert_eq!(model.config().max_position_embeddings, spec.max_pos);
    assert_eq!(
        model.config().layer_windows,
        vec![Some(Spec::MISTRAL_WINDOW); spec.layers]
    );
    let prompt = Rng::new(5).tokens(40);
    let gen = ours::engine_greedy(&model, &prompt, 60, DecodeMode::KvCache);
    assert_eq!(format!("{:?}", gen.finish_reason), "Length");
    let kv = gen.stats.kv_cache;
    assert!(
        kv.tokens > Spec::MISTRAL_WINDOW + 16,
        "{} tokens",
        kv.tokens
    );
    assert_eq!(
        kv_size_bytes(dir.path(), kv.tokens, kv.dtype),
        kv.bytes_used
    );
    assert_eq!(kv.bytes_held, kv.bytes_estimated_paged);
    assert!(kv.bytes_held < kv.bytes_full_cache);
}
