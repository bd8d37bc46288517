//! Issue 57: gpt-oss from a Hugging Face folder (`GptOssForCausalLM`) in transformers'
//! layout — the router `mlp.router`, the fused experts `mlp.experts.gate_up_proj` (gate and
//! up interleaved) and `down_proj`, dense or as gpt-oss ships them in MXFP4
//! (`_blocks`/`_scales`, codes in order, two per byte), the sinks `self_attn.sinks`.
//!
//! The folders are made here from the tiny GGUFs of `gpt_oss.rs` by the inverse of
//! llama.cpp's converter (conversion/gpt_oss.py): the same weights, so llama.cpp's fixtures
//! on those files are the folder's oracle too. Then the folder against the GGUF it came
//! from, the published gpt-oss-20b config, and damaged folders.
use crate::gpt_oss::{
    against_llama_cpp, write_tiny_gpt_oss, write_tiny_gpt_oss_mxfp4, EXPERTS, EXPERT_FF, HEADS,
    HEAD_DIM, HIDDEN, KV_HEADS, LAYERS, TOL_LOGPROB, TOL_LOGPROB_MXFP4, USED, VOCAB, WINDOW,
};
use crate::ours;
use crate::tiny::Rng;
use candle_core::quantized::GgmlDType;
use candle_core::{Device, Tensor};
use nanollm::model::gguf::header::read_header;
use nanollm::model::{Architecture, Loaded};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A tensor of the tiny GGUF: its F32 values with their dims (outermost first), or its
/// MXFP4 bytes.
enum Stored {
    F32(Vec<usize>, Vec<f32>),
    Mxfp4(Vec<u8>),
}

/// Every tensor of the GGUF at `path`, by name.
fn gguf_tensors(path: &Path) -> HashMap<String, Stored> {
    let bytes = std::fs::read(path).expect("read gguf");
    let h = read_header(&mut &bytes[..], bytes.len() as u64, "tiny").expect("header");
    let data = h.content.tensor_data_offset as usize;
    let mut out = HashMap::new();
    for (name, info) in &h.content.tensor_infos {
        assert_eq!(info.ggml_dtype, GgmlDType::F32, "{name}");
        let dims = info.shape.dims().to_vec();
        let at = data + info.offset as usize;
        let n: usize = dims.iter().product();
        let values = bytes[at..at + 4 * n]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        out.insert(name.clone(), Stored::F32(dims, values));
    }
    for (name, t) in &h.foreign {
        let at = data + t.offset as usize;
        let raw = bytes[at..at + t.bytes() as usize].to_vec();
        out.insert(name.clone(), Stored::Mxfp4(raw));
    }
    out
}

/// A ggml `block_mxfp4` (scale, then value j low and j + 16 high in byte j) as an HF block:
/// the scale, and values 2j and 2j + 1 in byte j.
fn hf_block(g: &[u8]) -> (u8, [u8; 16]) {
    let code = |i: usize| match i < 16 {
        true => g[1 + i] & 0x0F,
        false => g[1 + i - 16] >> 4,
    };
    (
        g[0],
        std::array::from_fn(|j| code(2 * j) | (code(2 * j + 1) << 4)),
    )
}

/// Rows of `cols` values of ggml MXFP4 bytes as `_blocks` and `_scales` bytes.
fn hf_mxfp4(rows: &[&[u8]]) -> (Vec<u8>, Vec<u8>) {
    let (mut blocks, mut scales) = (Vec::new(), Vec::new());
    for row in rows {
        for g in row.chunks_exact(17) {
            let (s, b) = hf_block(g);
            scales.push(s);
            blocks.extend(b);
        }
    }
    (blocks, scales)
}

fn f32_tensor(values: Vec<f32>, dims: &[usize]) -> Tensor {
    Tensor::from_vec(values, dims, &Device::Cpu).expect("tensor")
}

fn u8_tensor(values: Vec<u8>, dims: &[usize]) -> Tensor {
    Tensor::from_vec(values, dims, &Device::Cpu).expect("tensor")
}

/// The folder's tensors in transformers' names and layouts, from the GGUF's.
fn hf_tensors(g: &HashMap<String, Stored>) -> HashMap<String, Tensor> {
    let dense = |name: &str| match &g[name] {
        Stored::F32(dims, v) => (dims.clone(), v.clone()),
        Stored::Mxfp4(_) => panic!("{name} is MXFP4"),
    };
    let plain = |name: &str| {
        let (dims, v) = dense(name);
        f32_tensor(v, &dims)
    };
    let mut out = HashMap::from([
        (
            "model.embed_tokens.weight".into(),
            plain("token_embd.weight"),
        ),
        ("model.norm.weight".into(), plain("output_norm.weight")),
        ("lm_head.weight".into(), plain("output.weight")),
    ]);
    let (e, f, h) = (EXPERTS, EXPERT_FF, HIDDEN);
    for i in 0..LAYERS {
        let b = |s: &str| format!("blk.{i}.{s}");
        let l = |s: &str| format!("model.layers.{i}.{s}");
        for (ours, theirs) in [
            ("attn_norm.weight", "input_layernorm.weight"),
            (
                "post_attention_norm.weight",
                "post_attention_layernorm.weight",
            ),
            ("attn_q.weight", "self_attn.q_proj.weight"),
            ("attn_q.bias", "self_attn.q_proj.bias"),
            ("attn_k.weight", "self_attn.k_proj.weight"),
            ("attn_k.bias", "self_attn.k_proj.bias"),
            ("attn_v.weight", "self_attn.v_proj.weight"),
            ("attn_v.bias", "self_attn.v_proj.bias"),
            ("attn_output.weight", "self_attn.o_proj.weight"),
            ("attn_output.bias", "self_attn.o_proj.bias"),
            ("attn_sinks.weight", "self_attn.sinks"),
            ("ffn_gate_inp.weight", "mlp.router.weight"),
            ("ffn_gate_inp.bias", "mlp.router.bias"),
            ("ffn_down_exps.bias", "mlp.experts.down_proj_bias"),
        ] {
            out.insert(l(theirs), plain(&b(ours)));
        }
        // The fused bias: gate's i at 2i, up's at 2i + 1.
        let (_, gb) = dense(&b("ffn_gate_exps.bias"));
        let (_, ub) = dense(&b("ffn_up_exps.bias"));
        let fused: Vec<f32> = gb.iter().zip(&ub).flat_map(|(g, u)| [*g, *u]).collect();
        out.insert(
            l("mlp.experts.gate_up_proj_bias"),
            f32_tensor(fused, &[e, 2 * f]),
        );
        match (&g[&b("ffn_gate_exps.weight")], &g[&b("ffn_up_exps.weight")]) {
            (Stored::F32(_, gate), Stored::F32(_, up)) => {
                // `[E, hidden, 2F]`: column 2i the gate's row i, 2i + 1 the up's.
                let mut fused = vec![0f32; e * h * 2 * f];
                for x in 0..e {
                    for r in 0..f {
                        for c in 0..h {
                            let to = x * h * 2 * f + c * 2 * f + 2 * r;
                            fused[to] = gate[x * f * h + r * h + c];
                            fused[to + 1] = up[x * f * h + r * h + c];
                        }
                    }
                }
                out.insert(
                    l("mlp.experts.gate_up_proj"),
                    f32_tensor(fused, &[e, h, 2 * f]),
                );
                let (_, down) = dense(&b("ffn_down_exps.weight"));
                // `[E, F, hidden]`: the transpose of ggml's `[E, hidden, F]`.
                let mut t = vec![0f32; e * f * h];
                for x in 0..e {
                    for r in 0..h {
                        for c in 0..f {
                            t[x * f * h + c * h + r] = down[x * h * f + r * f + c];
                        }
                    }
                }
                out.insert(l("mlp.experts.down_proj"), f32_tensor(t, &[e, f, h]));
            }
            (Stored::Mxfp4(gate), Stored::Mxfp4(up)) => {
                let row = h / 32 * 17;
                let rows: Vec<&[u8]> = gate
                    .chunks_exact(row)
                    .zip(up.chunks_exact(row))
                    .flat_map(|(g, u)| [g, u])
                    .collect();
                let (blocks, scales) = hf_mxfp4(&rows);
                let p = l("mlp.experts.gate_up_proj");
                out.insert(
                    format!("{p}_blocks"),
                    u8_tensor(blocks, &[e, 2 * f, h / 32, 16]),
                );
                out.insert(
                    format!("{p}_scales"),
                    u8_tensor(scales, &[e, 2 * f, h / 32]),
                );
                let Stored::Mxfp4(down) = &g[&b("ffn_down_exps.weight")] else {
                    panic!("down is not MXFP4");
                };
                let rows: Vec<&[u8]> = down.chunks_exact(f / 32 * 17).collect();
                let (blocks, scales) = hf_mxfp4(&rows);
                let p = l("mlp.experts.down_proj");
                out.insert(
                    format!("{p}_blocks"),
                    u8_tensor(blocks, &[e, h, f / 32, 16]),
                );
                out.insert(format!("{p}_scales"), u8_tensor(scales, &[e, h, f / 32]));
            }
            _ => panic!("gate and up of different types"),
        }
    }
    out
}

/// The tiny model's config.json, as transformers' `GptOssConfig` writes one (MXFP4 adds
/// the `quantization_config` gpt-oss ships with). YaRN's `truncate` is left at its
/// default (true), as llama.cpp computes it on the GGUF the fixtures were recorded on (the
/// published configs say false: `published_gpt_oss_20b_config_reads_as_llama_cpp_s_gguf`).
fn config_json(mxfp4: bool) -> Value {
    let mut c = json!({
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": EXPERT_FF,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "num_local_experts": EXPERTS,
        "num_experts_per_tok": USED,
        "experts_per_token": USED,
        "sliding_window": WINDOW,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_theta": 150000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "original_max_position_embeddings": 4096},
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "attention_bias": true,
        "swiglu_limit": 7.0,
        "hidden_act": "silu",
        "tie_word_embeddings": false,
        "bos_token_id": 1,
        "eos_token_id": 2,
    });
    if mxfp4 {
        c["quantization_config"] = json!({"quant_method": "mxfp4", "modules_to_not_convert":
            ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]});
    }
    c
}

/// A WordLevel tokenizer over the GGUF's vocabulary (`<unk>`, `<s>`, `</s>`, `a`, `b`,
/// `ab`, `w6` …): the tests drive the model by token ids.
fn write_tokenizer(path: &Path) {
    let mut words: Vec<String> = ["<unk>", "<s>", "</s>", "a", "b", "ab"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    words.extend((words.len()..VOCAB).map(|i| format!("w{i}")));
    crate::tiny::word_level(words)
        .save(path, false)
        .expect("save tokenizer.json");
}

/// The HF folder of the tiny GGUF at `gguf`, written beside it.
fn folder_of(gguf: &Path) -> PathBuf {
    let g = gguf_tensors(gguf);
    let mxfp4 = g.values().any(|t| matches!(t, Stored::Mxfp4(_)));
    let dir = gguf.with_extension("hf");
    std::fs::create_dir_all(&dir).expect("mkdir");
    candle_core::safetensors::save(&hf_tensors(&g), dir.join("model.safetensors"))
        .expect("save safetensors");
    let cfg = serde_json::to_string_pretty(&config_json(mxfp4)).expect("json");
    std::fs::write(dir.join("config.json"), cfg).expect("config.json");
    write_tokenizer(&dir.join("tokenizer.json"));
    dir
}

fn load_folder_of(gguf: &Path) -> Loaded {
    ours::load(&folder_of(gguf), None)
}

/// The folder of the F32 file against llama.cpp's greedy run on that file.
#[test]
fn gpt_oss_hf_folder_matches_llama_cpp() {
    let fixture = include_str!("../fixtures/gpt_oss/llama-greedy.json");
    let write = |p: &Path| write_tiny_gpt_oss(p, GgmlDType::F32);
    against_llama_cpp(fixture, "HF F32", TOL_LOGPROB, write, load_folder_of);
}

/// The folder with MXFP4 experts (`_blocks`/`_scales`) against llama.cpp's run on the
/// MXFP4 file: the codes reordered into ggml's blocks exactly, on our MXFP4 kernels.
#[test]
fn gpt_oss_hf_mxfp4_folder_matches_llama_cpp() {
    let fixture = include_str!("../fixtures/gpt_oss/llama-greedy-mxfp4.json");
    let f = TOL_LOGPROB_MXFP4;
    against_llama_cpp(
        fixture,
        "HF MXFP4",
        f,
        write_tiny_gpt_oss_mxfp4,
        load_folder_of,
    );
}

/// Largest |Δ logit| allowed between a folder and the GGUF it was made from: the same
/// weights (MXFP4 experts on the same kernels), the folder's other matrices in f32 on
/// candle's and our GEMM against our F32 kernels for the GGUF's. Measured 2026-12-06:
/// 2.3e-6 (dense experts), 1.5e-6 (MXFP4).
const TOL_LOGIT: f32 = 1e-4;

/// The folder against the GGUF it came from, step by step (teacher-forced), and naive ==
/// kv-cache bit for bit on the folder.
#[test]
fn gpt_oss_hf_folder_equals_its_gguf() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = Rng::new(8);
    let (prompt, cont) = (rng.tokens(9), rng.tokens(10));
    for mxfp4 in [false, true] {
        let gguf = dir.path().join(format!("tiny-{mxfp4}.gguf"));
        match mxfp4 {
            true => write_tiny_gpt_oss_mxfp4(&gguf),
            false => write_tiny_gpt_oss(&gguf, GgmlDType::F32),
        }
        let (a, b) = (ours::load(&gguf, None), load_folder_of(&gguf));
        let c = b.config();
        assert_eq!(c.architecture, Architecture::GptOss);
        assert_eq!(c.layer_windows, a.config().layer_windows);
        assert!(c.attention_sinks && c.attention_bias);
        let (la, lb) = (
            ours::kv_cached(&a, &prompt, &cont),
            ours::kv_cached(&b, &prompt, &cont),
        );
        let worst = la
            .iter()
            .flatten()
            .zip(lb.iter().flatten())
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        eprintln!("gpt-oss HF vs GGUF (MXFP4 experts {mxfp4}): max |Δ logit| {worst:.2e}");
        assert!(worst < TOL_LOGIT, "MXFP4 {mxfp4}: max |Δ logit| {worst}");
        let bits = |v: Vec<Vec<f32>>| -> Vec<Vec<u32>> {
            v.iter()
                .map(|l| l.iter().map(|x| x.to_bits()).collect())
                .collect()
        };
        assert_eq!(
            bits(lb),
            bits(ours::naive(&b, &prompt, &cont)),
            "MXFP4 {mxfp4}: naive vs kv-cache"
        );
    }
}

/// openai/gpt-oss-20b's config.json as published (tests/fixtures/gpt_oss/
/// gpt-oss-20b-config.json) reads as llama.cpp reads the GGUF its converter makes of it:
/// alternating windows of 128, 32 experts with 4 per token, YaRN ×32 over 4,096 (not
/// truncated, as the config says), sinks, biases and the clamped SwiGLU; and `kv-size`
/// of the config equals the `gpt-oss-20b` preset.
#[test]
fn published_gpt_oss_20b_config_reads_as_llama_cpp_s_gguf() {
    let text = include_str!("../fixtures/gpt_oss/gpt-oss-20b-config.json");
    let v: Value = serde_json::from_str(text).expect("json");
    let hf = nanollm::model::hf::config::parse(&v).expect("parse");
    let c = hf.config;
    assert_eq!(c.architecture, Architecture::GptOss);
    assert_eq!(
        (c.hidden_size, c.num_hidden_layers, c.head_dim),
        (2880, 24, 64)
    );
    assert_eq!((c.num_attention_heads, c.num_key_value_heads), (64, 8));
    let m = c.moe.expect("experts");
    assert_eq!(
        (
            m.num_experts,
            m.num_experts_per_tok,
            m.moe_intermediate_size
        ),
        (32, 4, 2880)
    );
    assert!(m.norm_topk_prob && c.attention_sinks && c.attention_bias);
    assert!(!c.tie_word_embeddings && !c.rope_interleaved);
    assert_eq!(c.hidden_act, nanollm::model::config::HiddenAct::SwigluOai);
    let windows: Vec<Option<usize>> = (0..24).map(|i| (i % 2 == 0).then_some(128)).collect();
    assert_eq!(c.layer_windows, windows);
    match &c.rope_scaling {
        nanollm::model::rope::RopeScaling::Yarn(y) => {
            assert_eq!(
                (y.factor, y.original_max_position_embeddings),
                (32.0, 4096.0)
            );
            assert!(!y.truncate);
        }
        other => panic!("rope scaling {other:?}"),
    }
    assert_eq!(c.rope_theta, 150000.0);
    assert_eq!(hf.eos_token_ids, [200002]);
    let kv = |model: &str| -> Value {
        let out = assert_cmd::Command::cargo_bin("nanollm")
            .expect("binary")
            .args(["kv-size", "--seq", "32k", "--json", "--model", model])
            .output()
            .expect("kv-size");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/gpt_oss/gpt-oss-20b-config.json"
    );
    let (a, b) = (kv(config), kv("gpt-oss-20b"));
    assert_eq!(
        a["rows"], b["rows"],
        "kv-size: the published config vs the preset"
    );
    assert_eq!(a["model"]["groups"], b["model"]["groups"]);
}

/// Damaged or unsupported gpt-oss folders: one line naming the tensor or key.
#[test]
fn bad_gpt_oss_folders_are_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gguf = dir.path().join("tiny.gguf");
    write_tiny_gpt_oss_mxfp4(&gguf);
    let good = folder_of(&gguf);
    let tensors =
        candle_core::safetensors::load(good.join("model.safetensors"), &Device::Cpu).expect("load");
    type Edit = Box<dyn Fn(&mut HashMap<String, Tensor>, &mut Value)>;
    let scales = "model.layers.0.mlp.experts.down_proj_scales";
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "no scales",
            Box::new(move |t, _| {
                t.remove(scales);
            }),
            "has no tensor model.layers.0.mlp.experts.down_proj_scales",
        ),
        (
            "scales of another shape",
            Box::new(move |t, _| {
                t.insert(
                    scales.into(),
                    u8_tensor(vec![122; EXPERTS * HIDDEN], &[EXPERTS, HIDDEN, 1]),
                );
            }),
            "down_proj_scales has shape [4, 128, 1], expected [4, 128, 2]",
        ),
        (
            "scale 255",
            Box::new(move |t, _| {
                let mut s: Vec<u8> = t[scales]
                    .flatten_all()
                    .and_then(|x| x.to_vec1())
                    .expect("u8");
                s[3] = 255;
                t.insert(
                    scales.into(),
                    u8_tensor(s, &[EXPERTS, HIDDEN, EXPERT_FF / 32]),
                );
            }),
            "down_proj, expert 0: row 1, block 1 holds a scale that is not a finite number",
        ),
        (
            "NaN sink",
            Box::new(|t, _| {
                let name = "model.layers.1.self_attn.sinks";
                t.insert(name.into(), f32_tensor(vec![f32::NAN; HEADS], &[HEADS]));
            }),
            "model.layers.1.self_attn.sinks holds NaN",
        ),
        (
            "NaN expert bias",
            Box::new(|t, _| {
                let name = "model.layers.0.mlp.experts.down_proj_bias";
                let mut v = vec![0.5f32; EXPERTS * HIDDEN];
                v[1] = f32::NAN;
                t.insert(name.into(), f32_tensor(v, &[EXPERTS, HIDDEN]));
            }),
            "model.layers.0.mlp.experts.down_proj_bias holds NaN",
        ),
        (
            "NaN router bias",
            Box::new(|t, _| {
                let name = "model.layers.1.mlp.router.bias";
                t.insert(name.into(), f32_tensor(vec![f32::NAN; EXPERTS], &[EXPERTS]));
            }),
            "model.layers.1.mlp.router.bias holds NaN",
        ),
        (
            "no window, a sliding layer",
            Box::new(|_, c| {
                c.as_object_mut().map(|o| o.remove("sliding_window"));
            }),
            "sliding_window is missing or 0, but layers slide",
        ),
        (
            "another SwiGLU limit",
            Box::new(|_, c| c["swiglu_limit"] = json!(10.0)),
            "swiglu_limit is 10",
        ),
        (
            "a third layer type",
            Box::new(|_, c| c["layer_types"] = json!(["sliding_attention", "chunked_attention"])),
            "layer_types[1] is \"chunked_attention\"",
        ),
        (
            "another quantization",
            Box::new(|_, c| c["quantization_config"]["quant_method"] = json!("bitsandbytes")),
            "quant_method \"bitsandbytes\"",
        ),
    ];
    for (what, edit, needle) in cases {
        let bad = dir.path().join("bad");
        std::fs::create_dir_all(&bad).expect("mkdir");
        let (mut t, mut c) = (tensors.clone(), config_json(true));
        edit(&mut t, &mut c);
        candle_core::safetensors::save(&t, bad.join("model.safetensors")).expect("save");
        std::fs::write(bad.join("config.json"), c.to_string()).expect("config");
        std::fs::copy(good.join("tokenizer.json"), bad.join("tokenizer.json")).expect("copy");
        let e = match nanollm::model::source::load(&bad, &Device::Cpu, false) {
            Ok(_) => panic!("{what}: accepted"),
            Err(e) => format!("{e:#}"),
        };
        assert!(!e.contains('\n'), "{what}: {e}");
        assert!(e.contains(needle), "{what}: {e}");
    }
    // No layer slides: no window needed.
    let mut c = config_json(true);
    c.as_object_mut().map(|o| o.remove("sliding_window"));
    c["layer_types"] = json!(["full_attention", "full_attention"]);
    std::fs::write(good.join("config.json"), c.to_string()).expect("config");
    let m = ours::load(&good, None);
    assert_eq!(m.config().layer_windows, [None, None]);
}
