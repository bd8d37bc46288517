//! GGUF files of the llama, qwen2 and qwen3 architectures, written (f32 tensors) from the
//! same tiny random weights as the HF folders: the GGUF path (config switches: interleaved
//! RoPE with permuted Q/K rows for llama; QKV bias for qwen2; q_norm/k_norm and explicit
//! key_length for qwen3) gives the logits candle-transformers gives for the HF folder.
use crate::gguf_write::write_gguf;
use crate::oracle::TOL_F32;
use crate::ours;
use crate::reference::{max_abs_diff, Reference};
use crate::tiny::{self, Arch, Rng, Spec};
use nanollm::model::Architecture;

fn check(arch: Arch, gguf_arch: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = Spec::of(arch);
    let weights = tiny::write_folder(dir.path(), &spec, 77);
    let hf = ours::load(dir.path(), None);
    let gguf_path = dir.path().join("tiny.gguf");
    write_gguf(&gguf_path, gguf_arch, hf.config(), &weights);
    let gguf = ours::load(&gguf_path, None);
    let (g, h) = (gguf.config(), hf.config());
    assert_eq!(
        g.rope_interleaved,
        gguf_arch == "llama",
        "{gguf_arch}: RoPE pairing"
    );
    assert_eq!(
        (
            g.attention_bias,
            g.qk_norm,
            g.head_dim,
            g.architecture,
            g.moe
        ),
        (
            h.attention_bias,
            h.qk_norm,
            h.head_dim,
            h.architecture,
            h.moe
        ),
        "{gguf_arch}: switches"
    );
    let mut reference = Reference::load(arch, dir.path());
    let mut rng = Rng::new(99);
    let (prompt, cont) = (rng.tokens(6), rng.tokens(8));
    let mut want = vec![reference.forward(&prompt, 0)];
    for (k, &t) in cont.iter().enumerate() {
        want.push(reference.forward(&[t], prompt.len() + k));
    }
    for (mode, got) in [
        ("kv-cache", ours::kv_cached(&gguf, &prompt, &cont)),
        ("naive", ours::naive(&gguf, &prompt, &cont)),
    ] {
        let d = want
            .iter()
            .zip(&got)
            .map(|(w, g)| max_abs_diff(w, g))
            .fold(0.0, f32::max);
        eprintln!(
            "GGUF {gguf_arch} {mode}: max|Δlogit| vs candle-transformers on the HF folder {d:.2e}"
        );
        assert!(d <= TOL_F32, "GGUF {gguf_arch} {mode}: Δ {d}");
    }
}

#[test]
fn gguf_llama_with_permuted_qk_matches_the_hf_folder() {
    check(Arch::Llama, "llama");
}

#[test]
fn gguf_qwen2_matches_the_hf_folder() {
    check(Arch::Qwen2, "qwen2");
}

#[test]
fn gguf_qwen3_matches_the_hf_folder() {
    check(Arch::Qwen3, "qwen3");
}

/// Issue 57: `qwen3moe`, and a `llama` file with experts (Mixtral), their experts stacked
/// into `ffn_{gate,up,down}_exps` as llama.cpp's converter writes them.
#[test]
fn gguf_qwen3moe_matches_the_hf_folder() {
    check(Arch::Qwen3Moe, "qwen3moe");
}

#[test]
fn gguf_llama_with_experts_is_mixtral_and_matches_the_hf_folder() {
    check(Arch::Mixtral, "llama");
}

#[test]
fn gguf_architecture_switches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let weights = tiny::write_folder(dir.path(), &Spec::of(Arch::Qwen3), 1);
    let hf = ours::load(dir.path(), None);
    let path = dir.path().join("q3.gguf");
    write_gguf(&path, "qwen3", hf.config(), &weights);
    let c = ours::load(&path, None).config().clone();
    assert_eq!(c.architecture, Architecture::Qwen3);
    assert!(!c.rope_interleaved && c.qk_norm && !c.attention_bias && c.tie_word_embeddings);
    assert_eq!(c.head_dim, 16, "attention.key_length, not hidden/heads");
    // --dtype applies to safetensors only.
    let err = match nanollm::model::source::load_with(
        &path,
        &candle_core::Device::Cpu,
        nanollm::model::LoadOptions {
            dense_prefill: true,
            dtype: Some(nanollm::model::WeightDtype::Bf16),
            quantize: None,
        },
    ) {
        Ok(_) => panic!("--dtype bf16 accepted for a GGUF"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains("--dtype bf16") && err.contains("GGUF"),
        "{err}"
    );
}
