//! Issue 57's llama.cpp oracle for the mixtures of experts candle also checks: a tiny
//! `qwen3moe` GGUF and a tiny `llama` GGUF with experts (Mixtral), f32, written from the tiny
//! random folders (`tiny::write_folder`, seed [`SEED`]) as llama.cpp's converter lays them
//! out. `scripts/record-llama-top2.py` recorded llama-server's greedy tokens and top-2
//! log-probabilities on these exact files (`tests/fixtures/moe/`, the file's FNV-1a checked);
//! ours, teacher-forced on those tokens, must pick the same token wherever llama.cpp's top-2
//! margin is decisive and give every recorded log-probability within the tolerance.
use crate::gguf_write::write_gguf;
use crate::gpt_oss::against_llama_cpp_as;
use crate::ours;
use crate::tiny::{self, Arch, Spec};
use nanollm::model::Architecture;
use std::path::Path;

/// The folders' seed: the fixtures were recorded on the files it makes.
const SEED: u64 = 57;

/// |Δ log-probability| allowed against llama.cpp on these f32 files: llama.cpp's CPU path
/// keeps K and V in f16. Measured 2026-12-07 over 24 steps: qwen3moe 2.18e-3 (23 decisive),
/// Mixtral 3.72e-3 (24 decisive); with the router's renormalization inverted, Mixtral gave
/// 1.44e-1 and qwen3moe a different greedy token.
const TOL_LOGPROB: f64 = 0.02;

/// The tiny file of `arch`, as GGUF architecture `gguf_arch`, at `path`.
fn write_tiny(arch: Arch, gguf_arch: &str, path: &Path) {
    let dir = tempfile::tempdir().expect("tempdir");
    let weights = tiny::write_folder(dir.path(), &Spec::of(arch), SEED);
    let hf = ours::load(dir.path(), None);
    write_gguf(path, gguf_arch, hf.config(), &weights);
}

/// Ours against llama.cpp's `fixture` on the tiny `arch` file, loaded as `expect`.
fn check(fixture: &str, arch: Arch, gguf_arch: &str, expect: Architecture) {
    against_llama_cpp_as(
        fixture,
        gguf_arch,
        TOL_LOGPROB,
        |p| write_tiny(arch, gguf_arch, p),
        |p| ours::load(p, None),
        |c| {
            assert_eq!(c.architecture, expect);
            assert!(c.moe.is_some(), "{gguf_arch}: a mixture of experts");
        },
    );
}

#[test]
fn qwen3moe_matches_llama_cpp_greedy_top2_on_a_tiny_file() {
    check(
        include_str!("../fixtures/moe/llama-greedy-qwen3moe.json"),
        Arch::Qwen3Moe,
        "qwen3moe",
        Architecture::Qwen3Moe,
    );
}

/// A `llama` file with experts is Mixtral.
#[test]
fn mixtral_matches_llama_cpp_greedy_top2_on_a_tiny_file() {
    check(
        include_str!("../fixtures/moe/llama-greedy-mixtral.json"),
        Arch::Mixtral,
        "llama",
        Architecture::Mixtral,
    );
}

/// Writes the tiny files for `scripts/record-llama-top2.py`:
/// `NANOLLM_MOE_OUT=/tmp/moe-tiny cargo test --release --test hf_models -- --ignored write_tiny_moe_for_the_fixture`
/// writes `/tmp/moe-tiny-qwen3moe.gguf` and `/tmp/moe-tiny-mixtral.gguf`.
#[test]
#[ignore = "writes the fixtures' models for scripts/record-llama-top2.py"]
fn write_tiny_moe_for_the_fixture() {
    let out = std::env::var("NANOLLM_MOE_OUT").expect("NANOLLM_MOE_OUT");
    write_tiny(
        Arch::Qwen3Moe,
        "qwen3moe",
        Path::new(&format!("{out}-qwen3moe.gguf")),
    );
    write_tiny(
        Arch::Mixtral,
        "llama",
        Path::new(&format!("{out}-mixtral.gguf")),
    );
}
