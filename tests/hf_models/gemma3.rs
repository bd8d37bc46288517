//! Issue 42: a tiny random-weight Gemma 3 (3 layers: 0 and 2 slide with a 16-token window,
//! 1 is global; head_dim 32 ≠ hidden / heads; q/k norms, four norms per layer stored as w
//! and scaled by 1 + w, GELU-tanh, √hidden embedding scale, two RoPE bases).
//!
//! Oracles: candle-transformers' `gemma3` on the HF folder for sequences up to the window
//! (past it candle keeps W + 1 keys where HF and llama.cpp keep W); past the window an f64
//! forward pass written here with HF's mask (key position > query position − W). The GGUF
//! (norms stored as 1 + w, gemma3 keys) gives the HF folder's logits. Naive == KV-cached and
//! sliding == `--swa-full` bit for bit across the window and block edges.
use crate::gguf_write::write_gguf_with;
use crate::oracle::TOL_F32;
use crate::ours;
use crate::reference::{max_abs_diff, Reference};
use crate::tiny::{self, Arch, Rng, Spec};
use candle_core::quantized::gguf_file::Value as GgufValue;
use candle_core::Tensor;
use nanollm::model::Architecture;
use std::collections::HashMap;

fn folder(seed: u64) -> (tempfile::TempDir, HashMap<String, Tensor>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let w = tiny::write_folder(dir.path(), &Spec::of(Arch::Gemma3), seed);
    (dir, w)
}

fn worst(want: &[Vec<f32>], got: &[Vec<f32>]) -> f32 {
    assert_eq!(want.len(), got.len());
    want.iter()
        .zip(got)
        .map(|(w, g)| max_abs_diff(w, g))
        .fold(0.0, f32::max)
}

/// The GGUF of the same weights (llama.cpp's names, norms as 1 + w, window and pattern keys).
fn write_gemma_gguf(
    dir: &std::path::Path,
    config: &nanollm::model::ModelConfig,
    w: &HashMap<String, Tensor>,
) -> std::path::PathBuf {
    let path = dir.join("tiny-gemma3.gguf");
    write_gguf_with(
        &path,
        "gemma3",
        config,
        w,
        Vec::new(),
        vec![
            (
                "gemma3.attention.sliding_window".into(),
                GgufValue::U32(Spec::GEMMA_WINDOW as u32),
            ),
            (
                "gemma3.attention.sliding_window_pattern".into(),
                GgufValue::U32(Spec::GEMMA_PATTERN as u32),
            ),
            // llama.cpp's default scale (head_dim^−½) equals query_pre_attn_scalar here.
            ("gemma3.rope.freq_base_swa".into(), GgufValue::F32(10_000.0)),
        ],
    );
    path
}

#[test]
fn tiny_gemma3_matches_candle_transformers_up_to_the_window() {
    let (dir, w) = folder(42);
    let hf = ours::load(dir.path(), None);
    let c = hf.config();
    assert_eq!(c.architecture, Architecture::Gemma3);
    assert_eq!(c.layer_windows, vec![Some(16), None, Some(16)]);
    let gguf_path = write_gemma_gguf(dir.path(), c, &w);
    let gguf = ours::load(&gguf_path, None);
    assert_eq!(gguf.config().layer_windows, c.layer_windows);
    // kv-size reads the same layer pattern from the GGUF (period 2: layers 0 and 2 slide).
    let file = nanollm::model::gguf::GgufFile::open(&gguf_path).expect("open");
    let spec = nanollm::sizing::spec::KvSpec::from_gguf_metadata(&file.content.metadata)
        .expect("kv-size spec");
    let sliding: u64 = spec
        .groups
        .iter()
        .filter(|g| {
            matches!(
                g.kind,
                nanollm::sizing::spec::LayerKind::SlidingWindow { window: 16, .. }
            )
        })
        .map(|g| g.layers)
        .sum();
    assert_eq!((sliding, spec.num_layers()), (2, 3), "{spec:?}");
    assert_eq!(gguf.config().rope_local_theta, Some(10_000.0));
    let mut reference = Reference::load(Arch::Gemma3, dir.path());
    let mut rng = Rng::new(5);
    // 7 + 8 = 15 positions: within the window, where candle's mask is HF's.
    let (prompt, cont) = (rng.tokens(7), rng.tokens(8));
    let mut want = vec![reference.forward(&prompt, 0)];
    for (k, &t) in cont.iter().enumerate() {
        want.push(reference.forward(&[t], prompt.len() + k));
    }
    for (what, m) in [("HF folder", &hf), ("GGUF", &gguf)] {
        let kv = ours::kv_cached(m, &prompt, &cont);
        let naive = ours::naive(m, &prompt, &cont);
        let (d_kv, d_naive) = (worst(&want, &kv), worst(&want, &naive));
        eprintln!("tiny Gemma 3 {what}: max|Δlogit| vs candle-transformers kv-cache {d_kv:.2e}, naive {d_naive:.2e}");
        assert!(
            d_kv <= TOL_F32 && d_naive <= TOL_F32,
            "{what}: {d_kv} {d_naive}"
        );
        assert_eq!(kv, naive, "{what}: naive and KV-cached logits differ");
    }
}

/// The Gemma 3 text model in f64, straight from HF's modeling code, with HF's sliding
/// mask: logits of every position, `[n][vocab]`.
fn reference_f64(w: &HashMap<String, Tensor>, spec: &Spec, ids: &[u32]) -> Vec<Vec<f64>> {
    let get = |name: &str| -> Vec<f64> {
        w[name]
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .expect("tensor")
            .into_iter()
            .map(f64::from)
            .collect()
    };
    let (h, d, heads, kvh) = (spec.hidden, spec.head_dim, spec.heads, spec.kv_heads);
    let eps = spec.eps;
    let rms = |x: &[f64], wt: &[f64]| -> Vec<f64> {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let r = 1.0 / (ms + eps).sqrt();
        x.iter().zip(wt).map(|(v, w)| v * r * (1.0 + w)).collect()
    };
    let matvec = |m: &[f64], x: &[f64], rows: usize| -> Vec<f64> {
        let cols = x.len();
        (0..rows)
            .map(|r| {
                m[r * cols..(r + 1) * cols]
                    .iter()
                    .zip(x)
                    .map(|(a, b)| a * b)
                    .sum()
            })
            .collect()
    };
    let rope = |x: &mut [f64], pos: usize, base: f64| {
        let half = d / 2;
        for i in 0..half {
            let theta = pos as f64 * base.powf(-2.0 * i as f64 / d as f64);
            let (c, s) = (theta.cos(), theta.sin());
            let (a, b) = (x[i], x[i + half]);
            x[i] = a * c - b * s;
            x[i + half] = b * c + a * s;
        }
    };
    let embed = get("model.embed_tokens.weight");
    let n = ids.len();
    let mut x: Vec<Vec<f64>> = ids
        .iter()
        .map(|&t| {
            embed[t as usize * h..(t as usize + 1) * h]
                .iter()
                .map(|v| v * (h as f64).sqrt())
                .collect()
        })
        .collect();
    for l in 0..spec.layers {
        let p = |s: &str| get(&format!("model.layers.{l}.{s}.weight"));
        let sliding = (l + 1) % Spec::GEMMA_PATTERN != 0;
        let base = if sliding { 10_000.0 } else { spec.rope_theta };
        let (wq, wk, wv, wo) = (
            p("self_attn.q_proj"),
            p("self_attn.k_proj"),
            p("self_attn.v_proj"),
            p("self_attn.o_proj"),
        );
        let (qn, kn) = (p("self_attn.q_norm"), p("self_attn.k_norm"));
        let mut qs = Vec::new();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for (pos, xi) in x.iter().enumerate() {
            let a = rms(xi, &p("input_layernorm"));
            let (q, k, v) = (
                matvec(&wq, &a, heads * d),
                matvec(&wk, &a, kvh * d),
                matvec(&wv, &a, kvh * d),
            );
            let mut q: Vec<Vec<f64>> = q.chunks(d).map(|c| rms(c, &qn)).collect();
            let mut k: Vec<Vec<f64>> = k.chunks(d).map(|c| rms(c, &kn)).collect();
            q.iter_mut().for_each(|r| rope(r, pos, base));
            k.iter_mut().for_each(|r| rope(r, pos, base));
            qs.push(q);
            ks.push(k);
            vs.push(v.chunks(d).map(|c| c.to_vec()).collect::<Vec<_>>());
        }
        let scale = 1.0 / (d as f64).sqrt(); // query_pre_attn_scalar = head_dim
        for pos in 0..n {
            let mut o = vec![0f64; heads * d];
            for hq in 0..heads {
                let g = hq / (heads / kvh);
                // HF's sliding mask: keys j ≤ pos with j > pos − W.
                let keys: Vec<usize> = (0..=pos)
                    .filter(|&j| !sliding || j + Spec::GEMMA_WINDOW > pos)
                    .collect();
                let s: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        qs[pos][hq]
                            .iter()
                            .zip(&ks[j][g])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (&j, pj) in keys.iter().zip(&e) {
                    for c in 0..d {
                        o[hq * d + c] += pj / sum * vs[j][g][c];
                    }
                }
            }
            let attn = rms(&matvec(&wo, &o, h), &p("post_attention_layernorm"));
            x[pos].iter_mut().zip(&attn).for_each(|(a, b)| *a += b);
            let mm = rms(&x[pos], &p("pre_feedforward_layernorm"));
            let gate = matvec(&p("mlp.gate_proj"), &mm, spec.intermediate);
            let up = matvec(&p("mlp.up_proj"), &mm, spec.intermediate);
            let act: Vec<f64> = gate
                .iter()
                .zip(&up)
                .map(|(&g, &u)| {
                    let z = (2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g);
                    0.5 * g * (1.0 + z.tanh()) * u
                })
                .collect();
            let down = rms(
                &matvec(&p("mlp.down_proj"), &act, h),
                &p("post_feedforward_layernorm"),
            );
            x[pos].iter_mut().zip(&down).for_each(|(a, b)| *a += b);
        }
    }
    let norm = get("model.norm.weight");
    x.iter()
        .map(|xi| matvec(&embed, &rms(xi, &norm), tiny::VOCAB))
        .collect()
}

/// 120 positions (the window is 16): the prefill's last row and 20 decode steps against the
/// f64 formula with HF's mask, and the same logits from the GGUF.
#[test]
fn tiny_gemma3_past_the_window_matches_an_f64_reference_with_hf_mask() {
    let (dir, w) = folder(43);
    let spec = Spec::of(Arch::Gemma3);
    let hf = ours::load(dir.path(), None);
    let gguf = ours::load(&write_gemma_gguf(dir.path(), hf.config(), &w), None);
    let mut rng = Rng::new(11);
    let ids = rng.tokens(120);
    let (prompt, cont) = ids.split_at(100);
    let all = reference_f64(&w, &spec, &ids);
    let want: Vec<Vec<f32>> = all[99..]
        .iter()
        .map(|r| r.iter().map(|&v| v as f32).collect())
        .collect();
    for (what, m) in [("HF folder", &hf), ("GGUF", &gguf)] {
        let got = ours::kv_cached(m, prompt, cont);
        let d = worst(&want, &got);
        eprintln!(
            "tiny Gemma 3 {what}, positions 99–119: max|Δlogit| vs the f64 reference {d:.2e}"
        );
        assert!(d <= TOL_F32, "{what}: {d}");
    }
}

/// Naive == KV-cached and sliding == --swa-full, bit for bit, on 100 + 40 positions in
/// blocks of 16 (the window ends mid-block on every step).
#[test]
fn tiny_gemma3_naive_kv_cache_and_swa_full_agree_bit_for_bit() {
    let (dir, _) = folder(44);
    let m = ours::load(dir.path(), None);
    let mut rng = Rng::new(12);
    let (prompt, cont) = (rng.tokens(100), rng.tokens(40));
    let kv = ours::kv_cached(&m, &prompt, &cont);
    let naive = ours::naive(&m, &prompt, &cont);
    assert_eq!(kv, naive, "naive vs KV-cached");
    let full = ours::kv_cached_swa_full(&m, &prompt, &cont);
    assert_eq!(kv, full, "sliding vs --swa-full");
}

/// Bad Gemma 3 input: one clear line naming the key or tensor, and no model.
#[test]
fn bad_gemma3_files_name_the_key_or_tensor() {
    let (dir, w) = folder(45);
    let hf = ours::load(dir.path(), None);
    let config = hf.config().clone();
    let load_err = |path: &std::path::Path| match nanollm::model::source::load(
        path,
        &candle_core::Device::Cpu,
        false,
    ) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => format!("{e:#}"),
    };
    // A window of 0.
    let path = dir.path().join("w0.gguf");
    write_gguf_with(
        &path,
        "gemma3",
        &config,
        &w,
        Vec::new(),
        vec![("gemma3.attention.sliding_window".into(), GgufValue::U32(0))],
    );
    let e0 = load_err(&path);
    assert!(e0.contains("gemma3.attention.sliding_window is 0"), "{e0}");
    // A missing post-MLP norm.
    let mut missing = w.clone();
    missing.remove("model.layers.1.post_feedforward_layernorm.weight");
    let path = dir.path().join("nonorm.gguf");
    write_gemma_gguf_at(&path, &config, &missing);
    let e1 = load_err(&path);
    assert!(e1.contains("blk.1.post_ffw_norm.weight"), "{e1}");
    // An unknown layer type in config.json.
    let cfg_path = dir.path().join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).expect("read")).expect("json");
    cfg["layer_types"] =
        serde_json::json!(["sliding_attention", "chunked_attention", "full_attention"]);
    std::fs::write(&cfg_path, cfg.to_string()).expect("write");
    let e = load_err(dir.path());
    assert!(
        e.contains("layer_types[1]") && e.contains("chunked_attention"),
        "{e}"
    );
    for e in [&e0, &e1, &e] {
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

fn write_gemma_gguf_at(
    path: &std::path::Path,
    config: &nanollm::model::ModelConfig,
    w: &HashMap<String, Tensor>,
) {
    write_gguf_with(
        path,
        "gemma3",
        config,
        w,
        Vec::new(),
        vec![(
            "gemma3.attention.sliding_window".into(),
            GgufValue::U32(Spec::GEMMA_WINDOW as u32),
        )],
    );
}
