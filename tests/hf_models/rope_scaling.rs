//! Issue 14: RoPE scaling against candle-transformers.
//!
//! - A tiny Llama with Llama 3.1's `llama3` RoPE scaling (candle-transformers' `llama` applies
//!   it in `Cache::new`), as an HF folder with `rope_scaling` (transformers 4), the same with
//!   transformers 5's `rope_parameters` (rope_theta inside), and as a GGUF carrying
//!   `rope_freqs.weight` the way llama.cpp's converter writes it (conversion/llama.py
//!   `generate_extra_tensors`: factor 1 for short wavelengths, `factor` for long ones,
//!   `1 / ((1 − s) / factor + s)` between): max |Δlogit| ≤ 1e-4 at every step.
//! - YaRN's cos/sin tables against candle-transformers' `deepseek2` YaRN rotary embedding.
//!
//! The scaling parameters are chosen so that each llama3 band (kept, blended, divided) holds
//! one of the tiny model's four frequencies, and the test checks that plain RoPE would miss
//! the reference by far more than the tolerance.
use crate::gguf_write::write_gguf_with;
use crate::oracle::TOL_F32;
use crate::ours;
use crate::reference::{max_abs_diff, Reference};
use crate::tiny::{self, Arch, Rng, Spec};
use candle_core::quantized::gguf_file::Value as GgufValue;
use candle_core::{Device, Tensor};
use nanollm::model::rope::RopeScaling;
use nanollm::model::Loaded;
use serde_json::{json, Value};
use std::path::Path;

/// θ = 10,000, head_dim 8: θ_i = 1, 0.1, 0.01, 0.001, wavelengths 6.3, 63, 628, 6,283 —
/// below 128 / 4 = 32 (kept), between 32 and 128 (blended), above 128 (divided by 8).
fn llama3_params() -> Value {
    json!({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 128, "rope_type": "llama3"})
}

/// Write the tiny Llama into `dir` with `config` as its config.json.
fn folder(dir: &Path, config: &Value) -> std::collections::HashMap<String, Tensor> {
    let w = tiny::write_folder(dir, &Spec::of(Arch::Llama), 414);
    std::fs::write(dir.join("config.json"), config.to_string()).expect("write config.json");
    w
}

/// Teacher-forced logits of `model` (prefill, then one token a step, both decode modes)
/// against `reference`: the largest |Δlogit|.
fn worst_vs(model: &Loaded, reference: &mut Reference) -> f32 {
    let mut rng = Rng::new(31);
    let (prompt, cont) = (rng.tokens(7), rng.tokens(24));
    reference.reset();
    let mut want = vec![reference.forward(&prompt, 0)];
    for (k, &t) in cont.iter().enumerate() {
        want.push(reference.forward(&[t], prompt.len() + k));
    }
    let kv = ours::kv_cached(model, &prompt, &cont);
    let naive = ours::naive(model, &prompt, &cont);
    assert_eq!(kv, naive, "naive and kv-cache decode must agree to the bit");
    want.iter()
        .zip(&kv)
        .map(|(w, g)| max_abs_diff(w, g))
        .fold(0.0, f32::max)
}

#[test]
fn llama3_scaling_hf_and_gguf_match_candle_transformers() {
    let base = Spec::of(Arch::Llama).config_json();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut v4 = base.clone();
    v4["rope_scaling"] = llama3_params();
    let weights = folder(dir.path(), &v4);
    let mut reference = Reference::load(Arch::Llama, dir.path());

    // transformers 4: rope_theta + rope_scaling.
    let hf = ours::load(dir.path(), None);
    assert!(matches!(
        hf.config().rope_scaling,
        RopeScaling::Llama3 { .. }
    ));
    let d_hf = worst_vs(&hf, &mut reference);

    // transformers 5: rope_parameters with rope_theta inside, no top-level rope_theta.
    let dir5 = tempfile::tempdir().expect("tempdir");
    let mut v5 = base.clone();
    let obj = v5.as_object_mut().expect("object");
    obj.remove("rope_theta");
    obj.remove("rope_scaling");
    let mut params = llama3_params();
    params["rope_theta"] = base["rope_theta"].clone();
    v5["rope_parameters"] = params;
    folder(dir5.path(), &v5);
    let hf5 = ours::load(dir5.path(), None);
    assert_eq!(hf5.config(), hf.config(), "both spellings give one config");
    let d_hf5 = worst_vs(&hf5, &mut reference);

    // GGUF: plain rope metadata plus rope_freqs.weight, as llama.cpp converts Llama 3.1.
    let c = hf.config().clone();
    let (theta, dim) = (c.rope_theta, c.head_dim as f64);
    let (factor, low, high, old) = (8.0f64, 1.0f64, 4.0f64, 128.0f64);
    let rope_factors: Vec<f32> = (0..c.head_dim / 2)
        .map(|i| {
            let freq = 1.0 / theta.powf(2.0 * i as f64 / dim);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            if wavelen < old / high {
                1.0
            } else if wavelen > old / low {
                factor as f32
            } else {
                let smooth = (old / wavelen - low) / (high - low);
                (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
            }
        })
        .collect();
    let n = rope_factors.len();
    let ff = Tensor::from_vec(rope_factors, n, &Device::Cpu).expect("tensor");
    let gguf_path = dir.path().join("llama3.gguf");
    let dims = vec![(
        "llama.rope.dimension_count".to_string(),
        GgufValue::U32(c.head_dim as u32),
    )];
    write_gguf_with(
        &gguf_path,
        "llama",
        &c,
        &weights,
        vec![("rope_freqs.weight".into(), ff)],
        dims,
    );
    let gguf = ours::load(&gguf_path, None);
    assert_eq!(gguf.config().rope_scaling, RopeScaling::Default);
    assert_eq!(
        gguf.config().rope_freq_factors.as_ref().map(Vec::len),
        Some(4)
    );
    let d_gguf = worst_vs(&gguf, &mut reference);

    // Plain RoPE on the same weights: the test would notice a model that ignores scaling.
    let dir_plain = tempfile::tempdir().expect("tempdir");
    folder(dir_plain.path(), &base);
    let plain = ours::load(dir_plain.path(), None);
    let d_plain = worst_vs(&plain, &mut reference);

    eprintln!(
        "llama3 RoPE scaling, max|Δlogit| vs candle-transformers: rope_scaling {d_hf:.2e}, rope_parameters {d_hf5:.2e}, GGUF rope_freqs {d_gguf:.2e}; plain RoPE would be off by {d_plain:.2e}"
    );
    for (what, d) in [
        ("rope_scaling", d_hf),
        ("rope_parameters", d_hf5),
        ("GGUF rope_freqs.weight", d_gguf),
    ] {
        assert!(d <= TOL_F32, "{what}: Δ {d}");
    }
    assert!(
        d_plain > 100.0 * TOL_F32,
        "plain RoPE is not far off: {d_plain}"
    );
}

/// A config.json (transformers 5 spelling) with rope_theta 1e6 and a `rope_parameters`
/// `default` type loads with that theta (issue 14: it fell back to 10,000).
#[test]
fn rope_parameters_theta_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut v = Spec::of(Arch::Llama).config_json();
    v.as_object_mut().map(|o| o.remove("rope_theta"));
    v["rope_parameters"] = json!({"rope_type": "default", "rope_theta": 1_000_000.0});
    folder(dir.path(), &v);
    let m = ours::load(dir.path(), None);
    assert_eq!(m.config().rope_theta, 1e6);
    assert_eq!(m.config().rope_scaling, RopeScaling::Default);
}

/// YaRN: cos and sin tables (rotation of unit pairs) against candle-transformers' deepseek2
/// YaRN rotary embedding (interleaved pairs), same θ, factor, original context, betas; the
/// default attention factor 0.1·ln(4) + 1 (candle: mscale 1, mscale_all_dim 0).
#[test]
fn yarn_tables_match_candle_transformers_deepseek2() {
    use candle_transformers::models::deepseek2::{
        DeepSeekV2RopeConfig, DeepSeekV2RopeScaling, DeepSeekV2RotaryEmbedding, ScaledRopeType,
    };
    let (d, theta, positions) = (64usize, 10_000.0f32, 256usize);
    let cfg = json!({"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 256,
        "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
        "head_dim": d, "max_position_embeddings": 16384, "rope_theta": theta,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}});
    let ours = nanollm::model::hf::config::parse(&cfg)
        .expect("config")
        .config;
    let (inv_freq, attn) = ours.rope_inv_freq();
    assert!((attn - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-12);
    let rope = DeepSeekV2RotaryEmbedding::new(
        &DeepSeekV2RopeConfig {
            rope_scaling: Some(DeepSeekV2RopeScaling::Yarn {
                original_max_position_embeddings: 4096,
                beta_fast: 32.0,
                beta_slow: 1.0,
                mscale: 1.0,
                mscale_all_dim: 0.0,
                factor: 4.0,
                scaling_type: ScaledRopeType::Yarn,
            }),
            max_position_embeddings: positions,
            rope_theta: theta,
            qk_rope_head_dim: d,
        },
        candle_core::DType::F32,
        &Device::Cpu,
    )
    .expect("candle yarn");
    // Unit pairs (1, 0) rotate to (cos, sin) · attention factor.
    let unit: Vec<f32> = (0..positions * d)
        .map(|i| if i % 2 == 0 { 1.0 } else { 0.0 })
        .collect();
    let x = Tensor::from_vec(unit, (1, 1, positions, d), &Device::Cpu).expect("x");
    let (q, _) = rope.forward(&x, &x, 0).expect("rope");
    let got: Vec<f32> = q.flatten_all().and_then(|t| t.to_vec1()).expect("vec");
    let mut worst = 0f32;
    for p in 0..positions {
        for (i, &f) in inv_freq.iter().enumerate() {
            let angle = p as f32 * f as f32;
            let (c, s) = (angle.cos() * attn as f32, angle.sin() * attn as f32);
            let (gc, gs) = (got[p * d + 2 * i], got[p * d + 2 * i + 1]);
            worst = worst.max((c - gc).abs()).max((s - gs).abs());
        }
    }
    eprintln!("YaRN cos/sin vs candle-transformers deepseek2: max |Δ| {worst:.2e} over {positions} positions");
    assert!(worst <= 1e-4, "YaRN tables differ by {worst}");
}

/// Unsupported RoPE types are refused at load with one line naming the key and value.
#[test]
fn unsupported_rope_types_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut v = Spec::of(Arch::Llama).config_json();
    v["rope_scaling"] = json!({"rope_type": "longrope", "factor": 4.0,
        "short_factor": [1.0], "long_factor": [1.0]});
    folder(dir.path(), &v);
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
            && stderr.contains("rope_scaling.rope_type")
            && stderr.contains("longrope"),
        "{stderr}"
    );

    // GGUF: {arch}.rope.scaling.type longrope.
    let weights = tiny::write_folder(dir.path(), &Spec::of(Arch::Llama), 1);
    let c = ours::load(dir.path(), None).config().clone();
    let path = dir.path().join("longrope.gguf");
    write_gguf_with(
        &path,
        "llama",
        &c,
        &weights,
        Vec::new(),
        vec![(
            "llama.rope.scaling.type".into(),
            GgufValue::String("longrope".into()),
        )],
    );
    let err = match nanollm::model::source::load(&path, &Device::Cpu, true) {
        Ok(_) => panic!("a longrope GGUF loaded"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains("llama.rope.scaling.type") && err.contains("longrope"),
        "{err}"
    );
    // Partial RoPE (rope.dimension_count below head_dim).
    let path = dir.path().join("partial.gguf");
    write_gguf_with(
        &path,
        "llama",
        &c,
        &weights,
        Vec::new(),
        vec![("llama.rope.dimension_count".into(), GgufValue::U32(4))],
    );
    let err = match nanollm::model::source::load(&path, &Device::Cpu, true) {
        Ok(_) => panic!("a partial-RoPE GGUF loaded"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("llama.rope.dimension_count"), "{err}");
}

/// GGUF `rope.scaling.type` linear and yarn load as the HF spellings do.
#[test]
fn gguf_linear_and_yarn_metadata() {
    let dir = tempfile::tempdir().expect("tempdir");
    let weights = tiny::write_folder(dir.path(), &Spec::of(Arch::Llama), 2);
    let c = ours::load(dir.path(), None).config().clone();
    let meta = |kind: &str| {
        vec![
            (
                "llama.rope.scaling.type".to_string(),
                GgufValue::String(kind.into()),
            ),
            ("llama.rope.scaling.factor".to_string(), GgufValue::F32(4.0)),
            (
                "llama.rope.scaling.original_context_length".to_string(),
                GgufValue::U32(32),
            ),
        ]
    };
    let path = dir.path().join("linear.gguf");
    write_gguf_with(&path, "llama", &c, &weights, Vec::new(), meta("linear"));
    let m = ours::load(&path, None);
    assert_eq!(m.config().rope_scaling, RopeScaling::Linear { factor: 4.0 });
    let path = dir.path().join("yarn.gguf");
    write_gguf_with(&path, "llama", &c, &weights, Vec::new(), meta("yarn"));
    let m = ours::load(&path, None);
    match &m.config().rope_scaling {
        RopeScaling::Yarn(y) => {
            assert_eq!((y.factor, y.original_max_position_embeddings), (4.0, 32.0));
            assert!((y.attention_factor() - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-12);
        }
        other => panic!("expected yarn, got {other:?}"),
    }
}
