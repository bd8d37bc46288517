//! Tiny random DeepSeek models (issue 58): a V2-Lite-like shape (one `q_proj`, softmax
//! router, shared experts, a dense first layer, YaRN) that candle-transformers' `deepseek2`
//! also runs, and a V3-like one (a q LoRA, a sigmoid router with a selection bias and expert
//! groups, renormalized and scaled weights) that only llama.cpp checks. Written as an HF
//! folder and as `deepseek2` GGUFs the way llama.cpp's converter lays them out: the latent's
//! up-projection split per head (`attn_k_b`, `attn_v_b`), or, as older files, fused
//! (`attn_kv_b`).
use crate::gguf_write::write_gguf_with;
use crate::ours;
use crate::tiny::{self, Rng, VOCAB};
use candle_core::quantized::gguf_file::Value as GgufValue;
use candle_core::{Device, Tensor};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;

/// One tiny DeepSeek shape.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub v3: bool,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub q_lora: Option<usize>,
    pub kv_lora: usize,
    pub nope: usize,
    pub rope: usize,
    pub v_head: usize,
    pub intermediate: usize,
    pub experts: usize,
    pub per_tok: usize,
    pub moe_ff: usize,
    pub shared: usize,
    pub dense_layers: usize,
    pub max_pos: usize,
}

impl Shape {
    /// V2-Lite-like: latent 64 + 32 (96 values: the AVX2 kernels' 12 chunks), keys of 32 +
    /// 32, values of 16, 8 experts of 32 (2 per token) and one shared, layer 0 dense, YaRN
    /// factor 4 over 32 positions.
    pub fn v2() -> Shape {
        Shape {
            v3: false,
            hidden: 32,
            layers: 3,
            heads: 4,
            q_lora: None,
            kv_lora: 64,
            nope: 32,
            rope: 32,
            v_head: 16,
            intermediate: 64,
            experts: 8,
            per_tok: 2,
            moe_ff: 32,
            shared: 1,
            dense_layers: 1,
            max_pos: 256,
        }
    }

    /// V3-like: a q LoRA of 32, two shared experts, 4 groups of 2 experts (2 kept),
    /// sigmoid scores with a bias, renormalized, times 2.5; no YaRN.
    pub fn v3() -> Shape {
        Shape {
            v3: true,
            q_lora: Some(32),
            shared: 2,
            ..Shape::v2()
        }
    }

    /// Values of one cached latent row.
    pub fn latent(&self) -> usize {
        self.kv_lora + self.rope
    }

    /// config.json as the checkpoints' and transformers' DeepSeek configs write it (and
    /// candle-transformers' `DeepSeekV2Config` reads it).
    pub fn config_json(&self) -> Value {
        let (name, model_type) = match self.v3 {
            true => ("DeepseekV3ForCausalLM", "deepseek_v3"),
            false => ("DeepseekV2ForCausalLM", "deepseek_v2"),
        };
        let rope_scaling = match self.v3 {
            true => Value::Null,
            false => json!({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707}),
        };
        json!({
            "architectures": [name],
            "model_type": model_type,
            "vocab_size": VOCAB,
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "moe_intermediate_size": self.moe_ff,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.heads,
            "n_shared_experts": self.shared,
            "n_routed_experts": self.experts,
            "routed_scaling_factor": if self.v3 { 2.5 } else { 1.0 },
            "topk_method": if self.v3 { "noaux_tc" } else { "greedy" },
            "n_group": if self.v3 { 4 } else { 1 },
            "topk_group": if self.v3 { 2 } else { 1 },
            "num_experts_per_tok": self.per_tok,
            "moe_layer_freq": 1,
            "first_k_dense_replace": self.dense_layers,
            "norm_topk_prob": self.v3,
            "scoring_func": if self.v3 { "sigmoid" } else { "softmax" },
            "hidden_act": "silu",
            "max_position_embeddings": self.max_pos,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": false,
            "rope_theta": 10000.0,
            "rope_scaling": rope_scaling,
            "attention_bias": false,
            "q_lora_rank": self.q_lora,
            "kv_lora_rank": self.kv_lora,
            "qk_nope_head_dim": self.nope,
            "qk_rope_head_dim": self.rope,
            "v_head_dim": self.v_head,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "torch_dtype": "float32",
        })
    }
}

fn tensor(rng: &mut Rng, shape: &[usize], scale: f32, offset: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| offset + scale * rng.unit()).collect();
    Tensor::from_vec(data, shape, &Device::Cpu).expect("tensor")
}

/// Random weights for `s`, in transformers' names, f32.
pub fn weights(s: &Shape, seed: u64) -> HashMap<String, Tensor> {
    let mut rng = Rng::new(seed);
    let h = s.hidden;
    let qd = s.nope + s.rope;
    let lin = |fan_in: usize| 1.5 / (fan_in as f32).sqrt();
    let mut w = HashMap::new();
    let mut put = |w: &mut HashMap<String, Tensor>, name: String, shape: &[usize], scale, off| {
        w.insert(name, tensor(&mut rng, shape, scale, off));
    };
    put(
        &mut w,
        "model.embed_tokens.weight".into(),
        &[VOCAB, h],
        1.0,
        0.0,
    );
    for i in 0..s.layers {
        let p = format!("model.layers.{i}");
        let a = format!("{p}.self_attn");
        match s.q_lora {
            None => put(
                &mut w,
                format!("{a}.q_proj.weight"),
                &[s.heads * qd, h],
                lin(h),
                0.0,
            ),
            Some(r) => {
                put(&mut w, format!("{a}.q_a_proj.weight"), &[r, h], lin(h), 0.0);
                put(&mut w, format!("{a}.q_a_layernorm.weight"), &[r], 0.2, 1.0);
                put(
                    &mut w,
                    format!("{a}.q_b_proj.weight"),
                    &[s.heads * qd, r],
                    lin(r),
                    0.0,
                );
            }
        }
        put(
            &mut w,
            format!("{a}.kv_a_proj_with_mqa.weight"),
            &[s.latent(), h],
            lin(h),
            0.0,
        );
        put(
            &mut w,
            format!("{a}.kv_a_layernorm.weight"),
            &[s.kv_lora],
            0.2,
            1.0,
        );
        let kv_b = [s.heads * (s.nope + s.v_head), s.kv_lora];
        put(
            &mut w,
            format!("{a}.kv_b_proj.weight"),
            &kv_b,
            lin(s.kv_lora),
            0.0,
        );
        put(
            &mut w,
            format!("{a}.o_proj.weight"),
            &[h, s.heads * s.v_head],
            lin(s.heads * s.v_head),
            0.0,
        );
        let m = format!("{p}.mlp");
        if i < s.dense_layers {
            put(
                &mut w,
                format!("{m}.gate_proj.weight"),
                &[s.intermediate, h],
                lin(h),
                0.0,
            );
            put(
                &mut w,
                format!("{m}.up_proj.weight"),
                &[s.intermediate, h],
                lin(h),
                0.0,
            );
            put(
                &mut w,
                format!("{m}.down_proj.weight"),
                &[h, s.intermediate],
                lin(s.intermediate),
                0.0,
            );
        } else {
            // A router with spread logits: the top-k choice is clear of ties.
            put(
                &mut w,
                format!("{m}.gate.weight"),
                &[s.experts, h],
                4.0 * lin(h),
                0.0,
            );
            if s.v3 {
                put(
                    &mut w,
                    format!("{m}.gate.e_score_correction_bias"),
                    &[s.experts],
                    0.5,
                    0.0,
                );
            }
            let f = s.moe_ff;
            for e in 0..s.experts {
                let x = format!("{m}.experts.{e}");
                put(
                    &mut w,
                    format!("{x}.gate_proj.weight"),
                    &[f, h],
                    lin(h),
                    0.0,
                );
                put(&mut w, format!("{x}.up_proj.weight"), &[f, h], lin(h), 0.0);
                put(
                    &mut w,
                    format!("{x}.down_proj.weight"),
                    &[h, f],
                    lin(f),
                    0.0,
                );
            }
            let fs = f * s.shared;
            let x = format!("{m}.shared_experts");
            put(
                &mut w,
                format!("{x}.gate_proj.weight"),
                &[fs, h],
                lin(h),
                0.0,
            );
            put(&mut w, format!("{x}.up_proj.weight"), &[fs, h], lin(h), 0.0);
            put(
                &mut w,
                format!("{x}.down_proj.weight"),
                &[h, fs],
                lin(fs),
                0.0,
            );
        }
        put(
            &mut w,
            format!("{p}.input_layernorm.weight"),
            &[h],
            0.2,
            1.0,
        );
        put(
            &mut w,
            format!("{p}.post_attention_layernorm.weight"),
            &[h],
            0.2,
            1.0,
        );
    }
    put(&mut w, "model.norm.weight".into(), &[h], 0.2, 1.0);
    put(
        &mut w,
        "lm_head.weight".into(),
        &[VOCAB, h],
        2.0 * lin(h),
        0.0,
    );
    w
}

/// Write the folder for `s` into `dir` (config.json, f32 model.safetensors, tokenizer);
/// returns the weights.
pub fn write_folder(dir: &Path, s: &Shape, seed: u64) -> HashMap<String, Tensor> {
    std::fs::create_dir_all(dir).expect("mkdir");
    let w = weights(s, seed);
    candle_core::safetensors::save(&w, dir.join("model.safetensors")).expect("safetensors");
    let cfg = serde_json::to_string_pretty(&s.config_json()).expect("json");
    std::fs::write(dir.join("config.json"), cfg).expect("config.json");
    tiny::write_tokenizer(&dir.join("tokenizer.json"), false);
    let tc = json!({"chat_template": tiny::CHATML, "eos_token": "<|im_end|>", "bos_token": null});
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).expect("tokenizer_config");
    w
}

/// The `deepseek2` GGUF of `s` with `weights` (f32): the latent's up-projection split per
/// head (`attn_k_b` `[heads, kv_lora, nope]`, `attn_v_b` `[heads, v_head, kv_lora]`, the
/// `*_mla` length keys) as llama.cpp's converter writes it today, or with `fused`, the older
/// `attn_kv_b` and the per-head lengths in `key_length` / `value_length`. `edit` replaces
/// metadata entries and `skip` leaves tensors out (bad-input tests).
pub fn write_gguf(
    path: &Path,
    s: &Shape,
    w: &HashMap<String, Tensor>,
    fused: bool,
    edit: &[(&str, GgufValue)],
    skip: &[&str],
) {
    let dir = tempfile::tempdir().expect("tempdir");
    write_folder(dir.path(), s, 0);
    let mut config = ours::load(dir.path(), None).decoder.config().clone();
    config.moe = None;
    let qd = s.nope + s.rope;
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    let mut put = |name: String, t: Tensor| tensors.push((name, t));
    put(
        "token_embd.weight".into(),
        w["model.embed_tokens.weight"].clone(),
    );
    put("output.weight".into(), w["lm_head.weight"].clone());
    put("output_norm.weight".into(), w["model.norm.weight"].clone());
    for i in 0..s.layers {
        let (p, b) = (format!("model.layers.{i}"), format!("blk.{i}"));
        let get = |n: &str| w[&format!("{p}.{n}")].clone();
        put(
            format!("{b}.attn_norm.weight"),
            get("input_layernorm.weight"),
        );
        put(
            format!("{b}.ffn_norm.weight"),
            get("post_attention_layernorm.weight"),
        );
        match s.q_lora {
            None => put(format!("{b}.attn_q.weight"), get("self_attn.q_proj.weight")),
            Some(_) => {
                put(
                    format!("{b}.attn_q_a.weight"),
                    get("self_attn.q_a_proj.weight"),
                );
                put(
                    format!("{b}.attn_q_a_norm.weight"),
                    get("self_attn.q_a_layernorm.weight"),
                );
                put(
                    format!("{b}.attn_q_b.weight"),
                    get("self_attn.q_b_proj.weight"),
                );
            }
        }
        put(
            format!("{b}.attn_kv_a_mqa.weight"),
            get("self_attn.kv_a_proj_with_mqa.weight"),
        );
        put(
            format!("{b}.attn_kv_a_norm.weight"),
            get("self_attn.kv_a_layernorm.weight"),
        );
        let kv_b = get("self_attn.kv_b_proj.weight");
        if fused {
            put(format!("{b}.attn_kv_b.weight"), kv_b);
        } else {
            // llama.cpp's converter: view [heads, nope + v, kv_lora], split, k_b transposed.
            let kv_b = kv_b
                .reshape((s.heads, s.nope + s.v_head, s.kv_lora))
                .expect("view");
            let k_b = kv_b
                .narrow(1, 0, s.nope)
                .and_then(|t| t.transpose(1, 2))
                .and_then(|t| t.contiguous());
            let v_b = kv_b
                .narrow(1, s.nope, s.v_head)
                .and_then(|t| t.contiguous());
            put(format!("{b}.attn_k_b.weight"), k_b.expect("k_b"));
            put(format!("{b}.attn_v_b.weight"), v_b.expect("v_b"));
        }
        put(
            format!("{b}.attn_output.weight"),
            get("self_attn.o_proj.weight"),
        );
        if i < s.dense_layers {
            for (g, n) in [
                ("ffn_gate", "gate_proj"),
                ("ffn_up", "up_proj"),
                ("ffn_down", "down_proj"),
            ] {
                put(format!("{b}.{g}.weight"), get(&format!("mlp.{n}.weight")));
            }
            continue;
        }
        put(format!("{b}.ffn_gate_inp.weight"), get("mlp.gate.weight"));
        if s.v3 {
            put(
                format!("{b}.exp_probs_b.bias"),
                get("mlp.gate.e_score_correction_bias"),
            );
        }
        for (g, n) in [
            ("gate", "gate_proj"),
            ("up", "up_proj"),
            ("down", "down_proj"),
        ] {
            let parts: Vec<Tensor> = (0..s.experts)
                .map(|e| get(&format!("mlp.experts.{e}.{n}.weight")))
                .collect();
            put(
                format!("{b}.ffn_{g}_exps.weight"),
                Tensor::stack(&parts, 0).expect("stack"),
            );
            put(
                format!("{b}.ffn_{g}_shexp.weight"),
                get(&format!("mlp.shared_experts.{n}.weight")),
            );
        }
    }
    let a = "deepseek2";
    let k = |s: &str| format!("{a}.{s}");
    let u = |v: usize| GgufValue::U32(v as u32);
    let mut md: Vec<(String, GgufValue)> = vec![
        (k("attention.head_count_kv"), u(1)),
        (k("attention.kv_lora_rank"), u(s.kv_lora)),
        (k("rope.dimension_count"), u(s.rope)),
        (k("leading_dense_block_count"), u(s.dense_layers)),
        (k("expert_count"), u(s.experts)),
        (k("expert_used_count"), u(s.per_tok)),
        (k("expert_feed_forward_length"), u(s.moe_ff)),
        (k("expert_shared_count"), u(s.shared)),
        (
            k("expert_weights_scale"),
            GgufValue::F32(if s.v3 { 2.5 } else { 1.0 }),
        ),
        (k("expert_gating_func"), u(if s.v3 { 2 } else { 1 })),
        (k("vocab_size"), u(VOCAB)),
    ];
    match fused {
        true => {
            md.push((k("attention.key_length"), u(qd)));
            md.push((k("attention.value_length"), u(s.v_head)));
        }
        false => {
            md.push((k("attention.key_length"), u(s.latent())));
            md.push((k("attention.value_length"), u(s.kv_lora)));
            md.push((k("attention.key_length_mla"), u(qd)));
            md.push((k("attention.value_length_mla"), u(s.v_head)));
        }
    }
    // llama.cpp reads q_lora_rank for every non-Lite layer count; 0: one `attn_q`.
    md.push((k("attention.q_lora_rank"), u(s.q_lora.unwrap_or(0))));
    if s.v3 {
        md.push((k("expert_weights_norm"), GgufValue::Bool(true)));
        md.push((k("expert_group_count"), u(4)));
        md.push((k("expert_group_used_count"), u(2)));
    } else {
        md.push((k("rope.scaling.type"), GgufValue::String("yarn".into())));
        md.push((k("rope.scaling.factor"), GgufValue::F32(4.0)));
        md.push((k("rope.scaling.original_context_length"), u(32)));
        md.push((
            k("rope.scaling.yarn_log_multiplier"),
            GgufValue::F32(0.1 * 0.707),
        ));
    }
    md.extend(edit.iter().map(|(k, v)| (k.to_string(), v.clone())));
    tensors.retain(|(n, _)| !skip.contains(&n.as_str()));
    write_gguf_with(path, a, &config, &HashMap::new(), tensors, md);
}
