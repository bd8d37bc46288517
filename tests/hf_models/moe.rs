//! Issue 57: the mixtures of experts on tiny random models. A Q8_0 `qwen3moe` GGUF against
//! candle-transformers' `qwen3_moe` on the same values; the batched engine on the
//! MoE architectures (batched == alone, chunked, prefix hit == miss, bit for bit, greedy);
//! the refusals of bad expert metadata and tensors, one line each naming the key or tensor.
use crate::gguf_write::write_gguf_typed;
use crate::ours::{self, alone, request};
use crate::reference::max_abs_diff;
use crate::reference::Reference;
use crate::tiny::{self, Arch, Rng, Spec};
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use nanollm::engine::llm_engine::{EngineConfig, LlmEngine, SchedulerConfig};
use nanollm::engine::{CacheConfig, DecodeMode, Request};
use nanollm::kv::KvDtype;
use nanollm::model::Loaded;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Max |Δlogit| between ours on a Q8_0 GGUF and candle-transformers' f32 `qwen3_moe` on the
/// same Q8_0 values dequantized (candle's `quantized_qwen3_moe`, the GGUF oracle the issue
/// names, runs its experts on CUDA only: "moe_gemm_gguf is only implemented for the cuda
/// backend"). The weights are equal; ours rounds each product's activations to 8 bits
/// (Q8_1) on the quantized kernels and candle does not. Measured 2026-12-06 with this
/// protocol (7-token prompt, 8 decode steps, seeds 5–7, logits O(5)): Qwen3-MoE 0.028–0.130
/// per step, Mixtral 0.018–0.126, and the dense Qwen3 and Llama, whose decode rows take the
/// same 8-bit path, 0.050–0.116 (their prompt rows, on the f32 copy, 4e-6; an expert has
/// no f32 copy, so an MoE prompt differs by 0.018–0.037 too).
const TOL_Q8_0: f32 = 0.2;

/// The matrices of `weights` (2-D, rows of whole blocks of 32) rounded through Q8_0 and
/// back: the values a Q8_0 GGUF of them holds.
fn through_q8_0(weights: &HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    weights
        .iter()
        .map(|(k, t)| {
            let dims = t.dims();
            let t = match dims.len() == 2 && dims[1].is_multiple_of(32) {
                true => QTensor::quantize(t, GgmlDType::Q8_0)
                    .and_then(|q| q.dequantize(&Device::Cpu))
                    .expect("q8_0 round trip"),
                false => t.clone(),
            };
            (k.clone(), t)
        })
        .collect()
}

/// Write the tiny `arch` model into `dir`: an HF folder `hf` (f32) of the Q8_0-rounded
/// weights, and the GGUF of `gguf_arch` with Q8_0 matrices (the same values).
fn q8_0_gguf(dir: &Path, arch: Arch, gguf_arch: &str, seed: u64) -> PathBuf {
    let folder = dir.join("hf");
    let spec = Spec::of(arch);
    let weights = through_q8_0(&tiny::write_folder(&folder, &spec, seed));
    candle_core::safetensors::save(&weights, folder.join("model.safetensors")).expect("save");
    let hf = ours::load(&folder, None);
    let path = dir.join(format!("{gguf_arch}-q8_0.gguf"));
    write_gguf_typed(
        &path,
        gguf_arch,
        hf.config(),
        &weights,
        GgmlDType::Q8_0,
        Vec::new(),
        Vec::new(),
    );
    path
}

#[test]
fn qwen3moe_q8_0_gguf_matches_candle_on_the_same_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = q8_0_gguf(dir.path(), Arch::Qwen3Moe, "qwen3moe", 5);
    let ours_model = ours::load(&path, None);
    let mut oracle = Reference::load(Arch::Qwen3Moe, &dir.path().join("hf"));
    let mut rng = Rng::new(21);
    let (prompt, cont) = (rng.tokens(7), rng.tokens(8));
    let mut want = vec![oracle.forward(&prompt, 0)];
    for (k, &t) in cont.iter().enumerate() {
        want.push(oracle.forward(&[t], prompt.len() + k));
    }
    let kv = ours::kv_cached(&ours_model, &prompt, &cont);
    let naive = ours::naive(&ours_model, &prompt, &cont);
    assert_eq!(kv, naive, "naive and kv-cache decode must agree to the bit");
    let d = want
        .iter()
        .zip(&kv)
        .map(|(w, g)| max_abs_diff(w, g))
        .fold(0.0, f32::max);
    let scale = want.iter().flatten().fold(0.0f32, |m, x| m.max(x.abs()));
    eprintln!("qwen3moe Q8_0 GGUF: max|logit| {scale:.3}; max|Δ| vs candle-transformers qwen3_moe on the same values {d:.2e}");
    assert!(d <= TOL_Q8_0, "max|Δlogit| {d}");
    // The f32 GGUF path is within the f32 tolerance of the same oracle: the gap above is
    // the 8-bit activations.
    let f32_path = dir.path().join("qwen3moe-f32.gguf");
    let weights =
        candle_core::safetensors::load(dir.path().join("hf/model.safetensors"), &Device::Cpu)
            .expect("weights");
    crate::gguf_write::write_gguf(&f32_path, "qwen3moe", ours_model.config(), &weights);
    let f32_model = ours::load(&f32_path, None);
    let d32 = want
        .iter()
        .zip(&ours::kv_cached(&f32_model, &prompt, &cont))
        .map(|(w, g)| max_abs_diff(w, g))
        .fold(0.0, f32::max);
    assert!(d32 <= crate::oracle::TOL_F32, "f32 GGUF: {d32}");
}

/// Eight requests sharing a 24-token opening, arriving over several steps, through one
/// engine with chunked prefill (chunks of 16) and prefix caching: each request's tokens
/// equal its run alone; naive decode alone equals KV-cached.
pub fn batched_equals_alone(m: &Loaded, what: &str) {
    let mut rng = Rng::new(3);
    let opening = rng.tokens(24);
    let cache = CacheConfig {
        dtype: KvDtype::F16,
        block_size: 8,
        swa_full: false,
        evict: None,
    };
    let reqs: Vec<Request> = (0..8)
        .map(|i| {
            let mut p = opening.clone();
            p.extend(rng.tokens(2 + 5 * i));
            request(&p, 12, cache)
        })
        .collect();
    let want: Vec<Vec<u32>> = reqs.iter().map(|r| alone(m, r).tokens).collect();
    let naive = Request {
        mode: DecodeMode::Naive,
        ..reqs[3].clone()
    };
    assert_eq!(
        alone(m, &naive).tokens,
        want[3],
        "{what}: naive vs kv-cache"
    );
    let cfg = EngineConfig {
        cache,
        num_blocks: 1024,
        max_model_len: 128,
        offload: None,
        speculative: None,
        scheduler: SchedulerConfig {
            max_num_seqs: 8,
            max_num_batched_tokens: 16,
            enable_prefix_caching: true,
        },
    };
    let mut eng = LlmEngine::new(&m.decoder, &m.tokenizer, cfg).expect("engine");
    let arrive = [0, 0, 1, 2, 2, 4, 6, 9];
    let (mut done, mut ids, mut step) = (BTreeMap::new(), BTreeMap::new(), 0);
    while done.len() < reqs.len() {
        for (i, r) in reqs.iter().enumerate() {
            if arrive[i] == step {
                ids.insert(eng.add_request(r.clone()).expect("add"), i);
            }
        }
        for f in eng.step(false).expect("step").finished {
            done.insert(ids[&f.seq_id], f.generation.tokens);
        }
        step += 1;
        assert!(step < 10_000, "the engine does not finish");
    }
    let (queries, hits) = eng.prefix_cache_counters();
    assert!(hits > 0, "{what}: no prefix-cache hit in {queries} lookups");
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&done[&i], w, "{what}: request {i} batched vs alone");
    }
}

#[test]
fn moe_batched_chunked_prefix_cached_equal_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (arch, gguf_arch) in [(Arch::Qwen3Moe, "qwen3moe"), (Arch::Mixtral, "llama")] {
        let path = q8_0_gguf(dir.path(), arch, gguf_arch, 8);
        let m = ours::load(&path, None);
        batched_equals_alone(&m, &format!("{gguf_arch} Q8_0 GGUF"));
        let hf = ours::load(&dir.path().join("hf"), None);
        batched_equals_alone(&hf, &format!("{arch:?} HF folder"));
    }
}

/// Bad expert metadata or tensors: refused at load with one line naming the key or tensor.
#[test]
fn bad_expert_metadata_and_tensors_are_refused_naming_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("hf");
    let spec = Spec::of(Arch::Qwen3Moe);
    let weights = tiny::write_folder(&folder, &spec, 4);
    let hf = ours::load(&folder, None);
    // (what, metadata replaced, tensor damaged, what the error must say)
    type Case<'a> = (&'a str, Vec<(String, Value)>, Option<&'a str>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "used 0",
            vec![("qwen3moe.expert_used_count".into(), Value::U32(0))],
            None,
            "qwen3moe.expert_used_count is 0",
        ),
        (
            "used > count",
            vec![("qwen3moe.expert_used_count".into(), Value::U32(9))],
            None,
            "qwen3moe.expert_used_count is 9",
        ),
        (
            "count 0",
            vec![("qwen3moe.expert_count".into(), Value::U32(0))],
            None,
            "qwen3moe.expert_count",
        ),
        (
            "gating",
            vec![("qwen3moe.expert_gating_func".into(), Value::U32(2))],
            None,
            "qwen3moe.expert_gating_func is 2",
        ),
        (
            "shared",
            vec![("qwen3moe.expert_shared_count".into(), Value::U32(1))],
            None,
            "qwen3moe.expert_shared_count",
        ),
        (
            "huge count",
            vec![("qwen3moe.expert_count".into(), Value::U32(1 << 30))],
            None,
            "qwen3moe.expert_count is 1073741824",
        ),
        (
            "missing expert tensor",
            vec![],
            Some("blk.1.ffn_up_exps.weight"),
            "blk.1.ffn_up_exps.weight is missing",
        ),
        (
            "router shape",
            vec![],
            Some("blk.0.ffn_gate_inp.weight:reshape"),
            "blk.0.ffn_gate_inp.weight has shape",
        ),
    ];
    for (what, md, tensor, want) in cases {
        let mut w = weights.clone();
        let mut extra = Vec::new();
        match tensor {
            Some("blk.1.ffn_up_exps.weight") => {}
            Some(_) => {
                // A router of 7 rows for 8 experts.
                let r = w["model.layers.0.mlp.gate.weight"]
                    .narrow(0, 0, 7)
                    .and_then(|r| r.flatten_all())
                    .and_then(|r| r.to_vec1::<f32>())
                    .and_then(|v| Tensor::from_vec(v, (7, spec.hidden), &Device::Cpu))
                    .expect("router of 7 rows");
                w.insert("model.layers.0.mlp.gate.weight".into(), r);
            }
            None => {}
        }
        let path = dir
            .path()
            .join(format!("bad-{}.gguf", what.replace(' ', "-")));
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            write_gguf_typed(
                &path,
                "qwen3moe",
                hf.config(),
                &w,
                GgmlDType::F32,
                std::mem::take(&mut extra),
                md.clone(),
            )
        }));
        assert!(written.is_ok(), "{what}: could not write the file");
        if tensor == Some("blk.1.ffn_up_exps.weight") {
            drop_tensor(&path, "blk.1.ffn_up_exps.weight");
        }
        let err = match nanollm::model::source::load(&path, &Device::Cpu, false) {
            Ok(_) => panic!("{what}: loaded"),
            Err(e) => format!("{e:#}"),
        };
        assert!(err.contains(want), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
    }
}

/// Rewrite the GGUF at `path` without tensor `name`.
fn drop_tensor(path: &Path, name: &str) {
    let mut f = std::fs::File::open(path).expect("open");
    let content = gguf_file::Content::read(&mut f).expect("gguf");
    let tensors: Vec<(String, QTensor)> = content
        .tensor_infos
        .keys()
        .filter(|n| n.as_str() != name)
        .map(|n| {
            (
                n.clone(),
                content.tensor(&mut f, n, &Device::Cpu).expect("tensor"),
            )
        })
        .collect();
    let md: Vec<(&str, &Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let t: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, q)| (n.as_str(), q)).collect();
    let mut out = std::fs::File::create(path).expect("create");
    gguf_file::write(&mut out, &md, &t).expect("write");
}

/// `generate`'s routing figures: one sequence's decode step runs exactly k experts per layer,
/// the router histogram counts k choices per routed row (the prompt and every fed token), a
/// prompt touches between k and all experts, and the active bytes are the held matrices less
/// the unchosen experts' share.
#[test]
fn generate_reports_experts_touched_active_bytes_and_the_router_histogram() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = q8_0_gguf(dir.path(), Arch::Qwen3Moe, "qwen3moe", 12);
    let m = ours::load(&path, None);
    let spec = Spec::of(Arch::Qwen3Moe);
    let (e, k) = (spec.experts, spec.experts_per_tok);
    let prompt = Rng::new(5).tokens(20);
    let cache = CacheConfig::default();
    let gen = alone(&m, &request(&prompt, 9, cache));
    let s = gen.stats.moe.as_ref().expect("MoE stats");
    assert_eq!((s.num_experts, s.experts_per_tok), (e, k));
    assert_eq!((s.prefill_passes, s.decode_steps), (1, 8));
    assert_eq!(s.decode_experts_touched, k as f64);
    assert!(
        s.prefill_experts_touched >= k as f64 && s.prefill_experts_touched <= e as f64,
        "{}",
        s.prefill_experts_touched
    );
    assert_eq!(s.router_histogram.len(), spec.layers);
    for layer in &s.router_histogram {
        assert_eq!(layer.len(), e);
        assert_eq!(layer.iter().sum::<u64>(), ((20 + 8) * k) as u64);
    }
    // Held: every matrix; active: all but (E − k)/E of the experts.
    let w = m.decoder.weights();
    let bytes = |l: &nanollm::model::linear::Linear| l.quant.as_ref().map_or(0, |q| q.bytes());
    let mut held = bytes(&w.lm_head);
    let mut experts = 0;
    for l in &w.layers {
        held += l.matrices().into_iter().map(bytes).sum::<u64>();
        let moe = l.ffn.moe().expect("an MoE layer");
        experts += moe
            .experts
            .iter()
            .flat_map(|x| x.matrices())
            .map(bytes)
            .sum::<u64>();
    }
    let unchosen = experts / e as u64 * (e - k) as u64;
    assert_eq!(s.active_weight_bytes_per_token, held - unchosen);
}

/// `bench --concurrency 1,8` on a mixture of experts reports the experts a step reads per
/// layer: between k and all of them at each level, and more with 8 sequences in a step than
/// with one (the union of their routes).
#[test]
fn bench_reports_experts_touched_per_step_at_each_concurrency() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = q8_0_gguf(dir.path(), Arch::Qwen3Moe, "qwen3moe", 13);
    let spec = Spec::of(Arch::Qwen3Moe);
    let (e, k) = (spec.experts as f64, spec.experts_per_tok as f64);
    let json = dir.path().join("bench.json");
    assert_cmd::Command::cargo_bin("nanollm")
        .expect("binary")
        .arg("bench")
        .arg("-m")
        .arg(&path)
        .args([
            "--concurrency",
            "1,8",
            "--num-prompts",
            "8",
            "--prompt-len",
            "4",
        ])
        .args(["--gen-len", "24", "--max-model-len", "64", "--json"])
        .arg(&json)
        .assert()
        .success();
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("parse");
    let levels = doc["result"]["levels"].as_array().expect("levels");
    let touched: Vec<f64> = levels
        .iter()
        .map(|l| {
            l["experts_touched_per_step"]
                .as_f64()
                .expect("experts touched")
        })
        .collect();
    for t in &touched {
        assert!(*t >= k && *t <= e, "{touched:?}");
    }
    assert!(touched[1] > touched[0], "{touched:?}");
}
