//! Issue 58's llama.cpp oracle: the tiny V2-like and V3-like models as `deepseek2` GGUFs
//! (f32, the latent's up-projection split per head, as llama.cpp's converter writes today).
//! `scripts/record-llama-top2.py` recorded llama-server's greedy tokens and top-2
//! log-probabilities on these exact files (`tests/fixtures/deepseek/`, the file's FNV-1a
//! checked); ours, teacher-forced on those tokens, must pick the same token wherever
//! llama.cpp's margin is decisive and give every recorded log-probability within the
//! tolerance. The V3-like file (q LoRA, sigmoid router with a selection bias and expert
//! groups, renormalized and scaled) has no other oracle: candle has no sigmoid router.
use super::tiny::{write_folder, write_gguf, Shape};
use crate::gpt_oss::against_llama_cpp_as;
use crate::ours;
use nanollm::model::Architecture;
use std::path::Path;

/// The folders' seed: the fixtures were recorded on the files it makes.
const SEED: u64 = 58;

/// |Δ log-probability| allowed against llama.cpp on these f32 files (llama.cpp keeps its
/// latent cache in f16). Measured 2026-12-07: see the tests' messages and the closing note.
const TOL_LOGPROB: f64 = 0.02;

fn write_tiny(s: &Shape, path: &Path) {
    let dir = tempfile::tempdir().expect("tempdir");
    let w = write_folder(dir.path(), s, SEED);
    write_gguf(path, s, &w, false, &[], &[]);
}

fn check(fixture: &str, s: Shape) {
    against_llama_cpp_as(
        fixture,
        if s.v3 {
            "deepseek2 (V3-like)"
        } else {
            "deepseek2 (V2-like)"
        },
        TOL_LOGPROB,
        |p| write_tiny(&s, p),
        |p| ours::load(p, None),
        |c| {
            assert_eq!(c.architecture, Architecture::DeepSeek2);
            assert_eq!(c.mla.map(|m| m.q_lora_rank.is_some()), Some(s.v3));
        },
    );
}

#[test]
fn deepseek_v2_like_matches_llama_cpp_greedy_top2() {
    check(
        include_str!("../../fixtures/deepseek/llama-greedy-v2.json"),
        Shape::v2(),
    );
}

#[test]
fn deepseek_v3_like_matches_llama_cpp_greedy_top2() {
    check(
        include_str!("../../fixtures/deepseek/llama-greedy-v3.json"),
        Shape::v3(),
    );
}

/// Writes the tiny files for `scripts/record-llama-top2.py`:
/// `NANOLLM_DEEPSEEK_OUT=/tmp/ds cargo test --release --test hf_models -- --ignored write_tiny_deepseek_for_the_fixture`
/// writes `/tmp/ds-v2.gguf` and `/tmp/ds-v3.gguf`.
#[test]
#[ignore = "writes the fixtures' models for scripts/record-llama-top2.py"]
fn write_tiny_deepseek_for_the_fixture() {
    let out = std::env::var("NANOLLM_DEEPSEEK_OUT").expect("NANOLLM_DEEPSEEK_OUT");
    write_tiny(&Shape::v2(), Path::new(&format!("{out}-v2.gguf")));
    write_tiny(&Shape::v3(), Path::new(&format!("{out}-v3.gguf")));
}
