//! Each architecture's tiny random model: our decoder (both decode modes, and the engine)
//! against candle-transformers on the same config.json and safetensors.
//!
//! Tolerance: both sides compute in f32 from identical weights; they differ only in the
//! order of floating-point operations (our attention kernel and RoPE layout vs candle's
//! softmax/matmul). Logits here are O(1–10); we require max |Δlogit| ≤ 1e-4 at every step
//! (measured ≈ 1e-6, see the printed figures). Our two decode modes agree to the bit.
use crate::ours;
use crate::reference::{argmax, max_abs_diff, top2_margin, Reference};
use crate::tiny::{self, Arch, Rng, Spec};
use nanollm::engine::DecodeMode;

/// Max |Δlogit| allowed between our f32 decoder and candle-transformers.
pub const TOL_F32: f32 = 1e-4;
/// Prompt length and decode steps of every comparison.
const PROMPT: usize = 7;
const STEPS: usize = 8;

/// Prefill + 8 teacher-forced decode steps; greedy engine runs in both modes.
fn check(arch: Arch) {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = Spec::of(arch);
    tiny::write_folder(dir.path(), &spec, 1000 + arch as u64);
    let model = ours::load(dir.path(), None);
    let mut reference = Reference::load(arch, dir.path());
    let mut rng = Rng::new(7 + arch as u64);
    let prompt = rng.tokens(PROMPT);
    let cont = rng.tokens(STEPS);

    let mut want = vec![reference.forward(&prompt, 0)];
    for (k, &t) in cont.iter().enumerate() {
        want.push(reference.forward(&[t], PROMPT + k));
    }
    let kv = ours::kv_cached(&model, &prompt, &cont);
    let naive = ours::naive(&model, &prompt, &cont);
    let worst = |got: &[Vec<f32>]| {
        want.iter()
            .zip(got)
            .map(|(w, g)| max_abs_diff(w, g))
            .fold(0.0, f32::max)
    };
    let scale = want.iter().flatten().fold(0.0f32, |m, x| m.max(x.abs()));
    let (d_kv, d_naive) = (worst(&kv), worst(&naive));
    let d_modes = kv
        .iter()
        .zip(&naive)
        .map(|(a, b)| max_abs_diff(a, b))
        .fold(0.0, f32::max);
    eprintln!("{arch:?}: max|logit| {scale:.3}; max|Δ| vs candle-transformers: kv-cache {d_kv:.2e}, naive {d_naive:.2e}; kv vs naive {d_modes:.2e}");
    assert!(
        d_kv <= TOL_F32,
        "{arch:?}: kv-cache logits differ from candle-transformers by {d_kv}"
    );
    assert!(
        d_naive <= TOL_F32,
        "{arch:?}: naive logits differ from candle-transformers by {d_naive}"
    );
    assert_eq!(
        kv, naive,
        "{arch:?}: naive and kv-cache decode must agree to the bit"
    );

    // Greedy: the reference feeding back its own argmax, against the engine in both modes.
    reference.reset();
    let mut logits = reference.forward(&prompt, 0);
    let mut greedy = Vec::new();
    let mut margin = f32::INFINITY;
    for k in 0..STEPS {
        margin = margin.min(top2_margin(&logits));
        let t = argmax(&logits);
        greedy.push(t);
        if k + 1 < STEPS {
            logits = reference.forward(&[t], PROMPT + k);
        }
    }
    assert!(
        margin > 10.0 * TOL_F32,
        "{arch:?}: a near-tie ({margin}) would make the greedy check meaningless"
    );
    for mode in [DecodeMode::KvCache, DecodeMode::Naive] {
        let gen = ours::engine_greedy(&model, &prompt, STEPS, mode);
        assert_eq!(
            gen.tokens, greedy,
            "{arch:?} {mode:?}: greedy tokens differ from candle-transformers"
        );
    }
}

#[test]
fn llama_matches_candle_transformers() {
    check(Arch::Llama);
}

#[test]
fn mistral_matches_candle_transformers() {
    check(Arch::Mistral);
}

#[test]
fn qwen2_matches_candle_transformers() {
    check(Arch::Qwen2);
}

/// Issue 57: the mixtures of experts, against candle-transformers' `qwen3_moe` and `mixtral`.
#[test]
fn qwen3_moe_matches_candle_transformers() {
    check(Arch::Qwen3Moe);
}

#[test]
fn mixtral_matches_candle_transformers() {
    check(Arch::Mixtral);
}

#[test]
fn qwen3_matches_candle_transformers() {
    check(Arch::Qwen3);
}

/// Only f32 compute runs on the CPU: `--dtype bf16` / `f16` are one-line errors saying so,
/// while f16 and bf16 checkpoints (the Mistral and Qwen3 tiny models) load as f32.
#[test]
fn dtype_other_than_f32_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    tiny::write_folder(dir.path(), &Spec::of(Arch::Qwen3), 1);
    for dtype in ["bf16", "f16"] {
        let out = assert_cmd::Command::cargo_bin("nanollm")
            .expect("binary")
            .args(["generate", "--dtype", dtype, "--model"])
            .arg(dir.path())
            .args(["-n", "2", "w5"])
            .assert()
            .failure()
            .get_output()
            .clone();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!("--dtype {dtype}")) && stderr.contains("only f32"),
            "{stderr}"
        );
    }
    assert_cmd::Command::cargo_bin("nanollm")
        .expect("binary")
        .args(["generate", "--dtype", "f32", "--no-chat", "--model"])
        .arg(dir.path())
        .args(["-n", "2", "w5"])
        .assert()
        .success();
}

#[test]
fn unsupported_architecture_names_itself_and_the_supported_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = Spec::of(Arch::Llama);
    tiny::write_folder(dir.path(), &spec, 1);
    let mut cfg = spec.config_json();
    cfg["architectures"] = serde_json::json!(["GemmaForCausalLM"]);
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).expect("write");
    let err = match nanollm::model::source::load(dir.path(), &candle_core::Device::Cpu, true) {
        Ok(_) => panic!("an unsupported architecture loaded"),
        Err(e) => format!("{e:#}"),
    };
    for needle in [
        "GemmaForCausalLM",
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "config.json",
    ] {
        assert!(err.contains(needle), "{err:?} lacks {needle}");
    }
    let out = assert_cmd::Command::cargo_bin("nanollm")
        .expect("binary")
        .args(["generate", "--model"])
        .arg(dir.path())
        .args(["-n", "2", "w5"])
        .assert()
        .failure()
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: ")
            && stderr.contains("GemmaForCausalLM")
            && stderr.contains("Qwen3ForCausalLM"),
        "{stderr}"
    );
}

#[test]
fn tokenizer_json_bos_eos_and_chat_template() {
    let dir = tempfile::tempdir().expect("tempdir");
    tiny::write_folder(dir.path(), &Spec::of(Arch::Llama), 1);
    let m = ours::load(dir.path(), None);
    // Llama's tokenizer.json post-processor adds <s> (id 1): we prepend it once.
    assert_eq!(m.tokenizer.encode("w5 w6").expect("encode"), vec![1, 5, 6]);
    assert_eq!(m.tokenizer.add_bos, Some(1));
    // eos_token_id 2 (config.json) and <|im_end|> (tokenizer_config.json eos_token) stop.
    assert!(m.tokenizer.stop_token_ids.contains(&2) && m.tokenizer.stop_token_ids.contains(&4));
    assert_eq!(m.chat_template.as_deref(), Some(tiny::CHATML));
    let dir = tempfile::tempdir().expect("tempdir");
    tiny::write_folder(dir.path(), &Spec::of(Arch::Qwen3), 1);
    let m = ours::load(dir.path(), None);
    assert_eq!(m.tokenizer.encode("w5 w6").expect("encode"), vec![5, 6]);
    assert_eq!(m.tokenizer.add_bos, None);
    // chat_template.jinja overrides tokenizer_config.json, as in transformers >= 4.43.
    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "{{ messages[0].content }}",
    )
    .expect("write");
    let m = ours::load(dir.path(), None);
    assert_eq!(
        m.chat_template.as_deref(),
        Some("{{ messages[0].content }}")
    );
}

#[test]
fn sharded_checkpoint_loads_like_the_single_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = Spec::of(Arch::Qwen2);
    let w = tiny::write_folder(dir.path(), &spec, 5);
    let single = ours::load(dir.path(), None);
    std::fs::remove_file(dir.path().join("model.safetensors")).expect("rm");
    let (mut a, mut b) = (
        std::collections::HashMap::new(),
        std::collections::HashMap::new(),
    );
    let mut map = serde_json::Map::new();
    for (name, t) in w {
        let file = if name.contains("layers.0.") {
            "model-00001-of-00002.safetensors"
        } else {
            "model-00002-of-00002.safetensors"
        };
        map.insert(name.clone(), file.into());
        if file.starts_with("model-00001") {
            a.insert(name, t)
        } else {
            b.insert(name, t)
        };
    }
    candle_core::safetensors::save(&a, dir.path().join("model-00001-of-00002.safetensors"))
        .expect("save");
    candle_core::safetensors::save(&b, dir.path().join("model-00002-of-00002.safetensors"))
        .expect("save");
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .expect("write");
    let sharded = ours::load(dir.path(), None);
    let prompt = [5, 9, 13, 20];
    assert_eq!(
        ours::kv_cached(&single, &prompt, &[7, 8]),
        ours::kv_cached(&sharded, &prompt, &[7, 8])
    );
    std::fs::remove_file(dir.path().join("model-00002-of-00002.safetensors")).expect("rm");
    let err = match nanollm::model::source::load(dir.path(), &candle_core::Device::Cpu, true) {
        Ok(_) => panic!("loaded with a shard missing"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains("model-00002-of-00002.safetensors") && err.contains("missing"),
        "{err}"
    );
}
