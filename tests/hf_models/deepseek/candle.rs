//! Ours against candle-transformers' `deepseek2` (the V2-Lite-like shape: no q LoRA, a
//! softmax router, YaRN), from the same folder, and the same weights as `deepseek2` GGUFs
//! (split and fused up-projections) against the folder.
use super::tiny::{write_folder, write_gguf, Shape};
use crate::ours;
use crate::reference::{argmax, max_abs_diff};
use crate::tiny::Rng;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::deepseek2::{DeepSeekV2, DeepSeekV2Config};
use nanollm::model::decoder::attention::MlaPath;
use nanollm::model::Loaded;
use std::path::Path;

/// Max |Δ logit| against candle on f32 weights: both compute in f32, in other orders.
/// Measured 2026-12-07: see the test's message.
const TOL: f32 = 2e-3;

/// candle's logits for `prompt`, then each of `steps` greedy tokens fed one at a time:
/// the tokens and `[steps + 1][vocab]` logits.
fn candle_greedy(dir: &Path, prompt: &[u32], steps: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let dev = Device::Cpu;
    let text = std::fs::read_to_string(dir.join("config.json")).expect("config.json");
    let cfg: DeepSeekV2Config = serde_json::from_str(&text).expect("deepseek2 config");
    let tensors = candle_core::safetensors::load(dir.join("model.safetensors"), &dev).expect("st");
    let vb = VarBuilder::from_tensors(tensors, DType::F32, &dev);
    let mut model = DeepSeekV2::new(&cfg, vb).expect("deepseek2");
    let run = |m: &mut DeepSeekV2, ids: &[u32], pos: usize| -> Vec<f32> {
        let x = Tensor::new(ids, &dev)
            .and_then(|t| t.unsqueeze(0))
            .expect("ids");
        let l = m.forward(&x, pos).expect("candle forward");
        let l = l
            .to_dtype(DType::F32)
            .and_then(|l| l.flatten_all())
            .expect("logits");
        let v = l.to_vec1::<f32>().expect("logits");
        let vocab = cfg_vocab(&text);
        v[v.len() - vocab..].to_vec()
    };
    let mut logits = vec![run(&mut model, prompt, 0)];
    let mut tokens = Vec::new();
    for k in 0..steps {
        let next = argmax(logits.last().expect("logits"));
        tokens.push(next);
        logits.push(run(&mut model, &[next], prompt.len() + k));
    }
    (tokens, logits)
}

fn cfg_vocab(text: &str) -> usize {
    let v: serde_json::Value = serde_json::from_str(text).expect("json");
    v["vocab_size"].as_u64().expect("vocab") as usize
}

/// The worst |Δ logit| over the steps.
fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| max_abs_diff(x, y))
        .fold(0.0, f32::max)
}

fn with_path(mut m: Loaded, path: MlaPath) -> Loaded {
    m.decoder.set_mla_path(path);
    m
}

#[test]
fn tiny_deepseek_v2_matches_candle_transformers_on_both_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_folder(dir.path(), &Shape::v2(), 58);
    // Past YaRN's 32 original positions, within one 256-key range and past it.
    let prompt = Rng::new(7).tokens(40);
    let (cont, want) = candle_greedy(dir.path(), &prompt, 24);
    let mut report = Vec::new();
    for path in [MlaPath::Auto, MlaPath::Absorbed, MlaPath::Expanded] {
        let m = with_path(ours::load(dir.path(), None), path);
        let got = ours::kv_cached(&m, &prompt, &cont);
        let d = worst(&want, &got);
        report.push(format!("{path:?} {d:.2e}"));
        assert!(
            d < TOL,
            "{path:?}: max |Δ logit| {d} against candle ({report:?})"
        );
    }
    eprintln!("deepseek2 vs candle: {report:?}");
}

#[test]
fn deepseek2_ggufs_split_and_fused_match_the_folder() {
    for s in [Shape::v2(), Shape::v3()] {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = write_folder(dir.path(), &s, 58);
        let prompt = Rng::new(8).tokens(20);
        let folder = ours::load(dir.path(), None);
        let cont: Vec<u32> = Rng::new(9).tokens(8);
        let want = ours::kv_cached(&folder, &prompt, &cont);
        for fused in [false, true] {
            let file = dir.path().join(format!("tiny-{fused}.gguf"));
            write_gguf(&file, &s, &w, fused, &[], &[]);
            let m = ours::load(&file, None);
            let c = m.decoder.config();
            assert!(c.mla.is_some() && c.moe.is_some_and(|m| m.num_shared_experts == s.shared));
            let got = ours::kv_cached(&m, &prompt, &cont);
            let d = worst(&want, &got);
            assert!(
                d < 1e-4,
                "v3 {} fused {fused}: max |Δ logit| {d} against the folder",
                s.v3
            );
        }
    }
}
