//! The real Gemma 3 270M (Q4_K_M GGUF, installed by scripts/install-gemma3.sh) against
//! llama.cpp: its tokenizer's ids and its teacher-forced top-1 over a 1,024-token chunk
//! (positions 512–1,022: past the 512-token window of the sliding layers), recorded once in
//! tests/fixtures/gemma3/llama-top2.json by scripts/gemma3-top2.py.
mod common;
use nanollm::kv::{KvCache, KvDtype};
use serde_json::Value;

fn fixture() -> Value {
    let text = include_str!("fixtures/gemma3/llama-top2.json");
    serde_json::from_str(text).expect("fixture json")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|t| t.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn the_tokenizer_gives_llama_cpps_ids_on_the_text() {
    let m = common::gemma3();
    let f = fixture();
    let want = ids(&f["tokens"]);
    let text = include_str!("../assets/pride-and-prejudice-ch1-2.txt");
    let got = m.tokenizer.encode(text).expect("encode");
    assert_eq!(&got[..want.len()], &want[..], "first {} ids", want.len());
}

/// Where llama.cpp's top-2 margin exceeds 0.25, our top-1 is its top-1 at every scored
/// position, on the prefill kernels (dense f32) and on the quantized kernels; where it
/// exceeds 0.1, at 98% of them or more.
///
/// Why not every position above 0.1, as issue 42 first asked: llama.cpp's own two
/// attention paths part there. On this chunk its flash-attention run (`-fa on`) and its
/// plain run (`-fa off`, the fixture) disagree on the top-1 at 7 positions with margins
/// 0.10–0.21, and at 10 of the plain run's margins > 0.1 with margins up to 0.24 (its CPU
/// GELU also goes through an f16 table). Measured 2026-12-05: ours agrees at 457 of 461
/// (quantized kernels) and the 4 misses have margins 0.11–0.21, two of them positions
/// where llama.cpp's own two paths part too.
#[test]
fn teacher_forced_top1_agrees_with_llama_cpp_past_the_window() {
    let f = fixture();
    let tokens = ids(&f["tokens"]);
    let first = f["first_scored"].as_u64().expect("first") as usize;
    let ctx = f["ctx"].as_u64().expect("ctx") as usize;
    let top2 = f["top2"].as_array().expect("top2");
    assert_eq!(top2.len(), ctx - 1 - first);
    let path = common::gemma3_path();
    for dense in [true, false] {
        let m =
            nanollm::model::source::load(&path, &candle_core::Device::Cpu, dense).expect("load");
        let d = &m.decoder;
        let mut cache = KvCache::new(d.config().kv_shape(KvDtype::F16), 16, ctx).expect("cache");
        let logits = d
            .forward_logits(&tokens[..ctx], 0, ctx, &mut cache, first)
            .expect("forward");
        let vocab = d.config().vocab_size;
        let (mut checked, mut agree, mut misses, mut wide) = (0, 0, Vec::new(), 0);
        for (i, t) in top2.iter().enumerate() {
            let (want, margin) = (
                t[0].as_u64().expect("id") as usize,
                t[2].as_f64().expect("m"),
            );
            let row = &logits[i * vocab..(i + 1) * vocab];
            let got = (0..vocab)
                .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                .expect("argmax");
            if margin > 0.1 {
                checked += 1;
                if got == want {
                    agree += 1;
                } else {
                    misses.push((first + i, got, want, margin));
                }
            }
            wide += usize::from(margin > 0.25);
        }
        eprintln!(
            "dense {dense}: top-1 agrees at {agree} of {checked} positions with margin > 0.1; misses (position, ours, llama.cpp's, margin): {misses:?}"
        );
        assert!(
            checked > 400 && wide > 350,
            "only {checked} ({wide}) positions checked"
        );
        let wide_misses: Vec<_> = misses.iter().filter(|m| m.3 > 0.25).collect();
        assert!(
            wide_misses.is_empty(),
            "dense {dense}: misses at margins > 0.25: {wide_misses:?}"
        );
        assert!(
            agree * 100 >= checked * 98,
            "dense {dense}: {agree} of {checked}: {misses:?}"
        );
    }
}

/// `perplexity --json` on the real Gemma 3 over every 512-token chunk of the shipped text
/// (4 chunks): with `compare`, against the f16 base saved in `dir`, else saving it.
fn gemma3_perplexity(dir: &std::path::Path, dtype: &str, compare: bool) -> Value {
    let path = common::gemma3_path();
    let base = dir.join("f16.kld");
    let mut cmd = assert_cmd::Command::cargo_bin("nanollm").expect("binary");
    cmd.arg("perplexity")
        .arg("-m")
        .arg(&path)
        .args(["--ctx-size", "512", "--json", "--kv-cache-dtype", dtype])
        .arg("--kl-divergence-base")
        .arg(&base);
    if compare {
        cmd.arg("--kl-divergence");
    }
    let out = cmd.output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{dtype}: {stderr}");
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

/// On Gemma 3 (head_dim 256) the rotated q4_0 cache loses clearly less than plain q4_0.
/// Rotating each 64 values (before 2026-12-06) gave mean KLD 0.0834 against q4_0's 0.0892
/// over these 4 chunks (0.935×; on the first chunk alone it was worse, 0.0958 against
/// 0.0916); groups of 128 give 0.0743 (0.83×), and `--json` names the groups.
#[test]
fn rotated_q4_0_beats_q4_0_on_gemma3_head_dim_256() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = gemma3_perplexity(dir.path(), "f16", false);
    assert_eq!(base["chunks"], 4);
    assert_eq!(base["kv_rotation_groups"], Value::Null);
    let kld = |dtype: &str| {
        let run = gemma3_perplexity(dir.path(), dtype, true);
        let mean = run["kl_divergence"]["mean_kld"].as_f64().expect("mean_kld");
        (mean, run)
    };
    let (plain, _) = kld("q4_0");
    let (rotated, run) = kld("q4_0r");
    assert_eq!(run["kv_rotation_groups"], serde_json::json!([128, 128]));
    assert!(
        plain > 0.0 && rotated <= 0.9 * plain,
        "q4_0r mean KLD {rotated} against q4_0 {plain}"
    );
}

/// A draft beside Gemma 3 (here the model itself) shares the KV budget token for token: its
/// blocks hold every layer, the target's one of its six layer groups, so each draft block
/// is paired with six target blocks and the two caches hold the same tokens, in bytes
/// about half each (pairing one for one gave the draft 86%: a 20 MiB budget then held
/// 60 target blocks, under one 200-token sequence).
#[test]
fn a_draft_beside_gemma3_holds_as_many_tokens_as_the_target() {
    use nanollm::engine::llm_engine::{EngineConfig, LlmEngine, SchedulerConfig};
    use nanollm::engine::CacheConfig;
    let m = common::gemma3();
    let cache = CacheConfig {
        dtype: KvDtype::F16,
        block_size: 16,
        swa_full: false,
        evict: None,
    };
    let plain = LlmEngine::new(
        &m.decoder,
        &m.tokenizer,
        EngineConfig {
            cache,
            num_blocks: 426,
            max_model_len: 200,
            offload: None,
            speculative: None,
            scheduler: SchedulerConfig {
                max_num_seqs: 8,
                max_num_batched_tokens: 128,
                enable_prefix_caching: true,
            },
        },
    )
    .expect("engine");
    let budget = 426 * plain.pool().block_bytes() as u64;
    let config = *plain.config();
    drop(plain);
    let e = LlmEngine::with_draft(&m.decoder, Some(&m.decoder), &m.tokenizer, config)
        .expect("a 20 MiB budget holds a 200-token sequence beside its draft");
    let target = e.pool().max_blocks();
    let (_, draft) = e.draft_blocks().expect("draft pool");
    assert_eq!(target, 6 * draft, "target {target} blocks, draft {draft}");
    let draft_block = 18 * 2 * 256 * 2 * 16; // layers × K,V × head_dim × f16 × tokens (1 KV head)
    let used = target as u64 * e.pool().block_bytes() as u64 + draft as u64 * draft_block;
    assert!(used <= budget, "{used} > {budget}");
    assert!(
        used * 10 >= budget * 9,
        "{used} of {budget}: budget left unused"
    );
    // The default budget grown for a draft (`blocks_with_draft`) leaves the target the
    // blocks it asked for, also when they do not divide by the six groups: one sequence of
    // the full context (2,253 blocks) at --max-num-seqs 1 was refused by 3 blocks.
    let want = 2253;
    let grown = nanollm::engine::llm_engine::blocks_with_draft(
        m.decoder.config(),
        m.decoder.config(),
        &cache,
        want,
    );
    let e = LlmEngine::with_draft(
        &m.decoder,
        Some(&m.decoder),
        &m.tokenizer,
        EngineConfig {
            num_blocks: grown,
            max_model_len: m.decoder.config().max_position_embeddings,
            scheduler: SchedulerConfig {
                max_num_seqs: 1,
                ..config.scheduler
            },
            ..config
        },
    )
    .expect("the grown default budget holds a full-context sequence beside its draft");
    assert!(e.pool().max_blocks() >= want, "{}", e.pool().max_blocks());
}
