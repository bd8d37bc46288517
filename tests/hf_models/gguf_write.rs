//! Converting between HF and GGUF tensor layouts, for tests: tiny HF weights written as a
//! GGUF (as llama.cpp's convert_hf_to_gguf.py would), and a GGUF dequantized and written as an
//! HF folder (its inverse).
//!
//! llama.cpp permutes the Q and K rows of `llama` (and `mistral`) models so that RoPE can
//! rotate adjacent pairs: per head of `d` rows, GGUF row `2i + s` is HF row `s · d/2 + i`
//! (s ∈ {0, 1}, i < d/2), i.e. the pairs (2i, 2i+1) come from HF rows (i, i + d/2). In tensor
//! terms (convert_hf_to_gguf.py `LlamaModel.permute`): reshape `[heads, 2, d/2, in]`, swap
//! axes 1 and 2, reshape back. The inverse reshapes `[heads, d/2, 2, in]` and swaps back.
//! Qwen2/Qwen3 GGUFs are not permuted.
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use nanollm::model::gguf::GgufFile;
use nanollm::model::{Architecture, ModelConfig, Tokenizer};
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;

/// HF → GGUF row order of a Q or K weight (`[heads · d, in]`) or bias (`[heads · d]`).
pub fn permute(w: &Tensor, heads: usize) -> Tensor {
    reorder(w, heads, 2, false)
}

/// GGUF → HF row order: the inverse of [`permute`].
pub fn unpermute(w: &Tensor, heads: usize) -> Tensor {
    reorder(w, heads, 2, true)
}

fn reorder(w: &Tensor, heads: usize, pairs: usize, inverse: bool) -> Tensor {
    let dims = w.dims().to_vec();
    let rows = dims[0];
    let half = rows / heads / pairs;
    let rest: Vec<usize> = dims[1..].to_vec();
    let mut shape = if inverse {
        vec![heads, half, pairs]
    } else {
        vec![heads, pairs, half]
    };
    shape.extend(&rest);
    w.reshape(shape)
        .and_then(|t| t.transpose(1, 2))
        .and_then(|t| t.contiguous())
        .and_then(|t| t.reshape(dims))
        .expect("reorder rows")
}

/// The GGUF name of an HF tensor name of a `gemma3` model: Gemma's four norms per layer.
pub fn gguf_name_gemma3(hf: &str) -> String {
    for (h, g) in [
        ("post_attention_layernorm.", "post_attention_norm."),
        ("pre_feedforward_layernorm.", "ffn_norm."),
        ("post_feedforward_layernorm.", "post_ffw_norm."),
    ] {
        if let Some((head, tail)) = hf.split_once(h) {
            let layer = head.strip_prefix("model.layers.").expect("a layer tensor");
            return format!("blk.{layer}{g}{tail}");
        }
    }
    gguf_name(hf)
}

/// The GGUF name of an HF tensor name (llama.cpp's tensor map).
pub fn gguf_name(hf: &str) -> String {
    let map = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = map.iter().find(|(h, _)| *h == hf) {
        return g.to_string();
    }
    let rest = hf.strip_prefix("model.layers.").expect("a layer tensor");
    let (layer, name) = rest.split_once('.').expect("layer.name");
    let parts = [
        ("self_attn.q_proj.", "attn_q."),
        ("self_attn.k_proj.", "attn_k."),
        ("self_attn.v_proj.", "attn_v."),
        ("self_attn.o_proj.", "attn_output."),
        ("self_attn.q_norm.", "attn_q_norm."),
        ("self_attn.k_norm.", "attn_k_norm."),
        ("mlp.gate_proj.", "ffn_gate."),
        ("mlp.up_proj.", "ffn_up."),
        ("mlp.down_proj.", "ffn_down."),
        ("input_layernorm.", "attn_norm."),
        ("post_attention_layernorm.", "ffn_norm."),
    ];
    let (h, g) = parts
        .iter()
        .find(|(h, _)| name.starts_with(h))
        .expect("known tensor");
    format!("blk.{layer}.{g}{}", &name[h.len()..])
}

/// The HF name of a GGUF tensor name.
fn hf_name(gguf: &str, hf_names: &[String]) -> String {
    hf_names
        .iter()
        .find(|h| gguf_name(h) == gguf)
        .cloned()
        .unwrap_or_else(|| panic!("no HF name for {gguf}"))
}

/// Write f32 HF-named `weights` of a model with `config` as a GGUF of architecture `arch`
/// (f32 tensors), with a tiny gpt2-BPE tokenizer of `config.vocab_size` tokens.
pub fn write_gguf(
    path: &Path,
    arch: &str,
    config: &ModelConfig,
    weights: &HashMap<String, Tensor>,
) {
    write_gguf_with(path, arch, config, weights, Vec::new(), Vec::new());
}

/// [`write_gguf`] plus `extra_tensors` (GGUF names, f32) and `extra_metadata` entries (each
/// replacing the entry of the same key, if any).
pub fn write_gguf_with(
    path: &Path,
    arch: &str,
    config: &ModelConfig,
    weights: &HashMap<String, Tensor>,
    extra_tensors: Vec<(String, Tensor)>,
    extra_metadata: Vec<(String, Value)>,
) {
    write_gguf_typed(
        path,
        arch,
        config,
        weights,
        GgmlDType::F32,
        extra_tensors,
        extra_metadata,
    )
}

/// A mixture of experts' HF tensors (Qwen3-MoE `mlp.gate`, `mlp.experts.E.{gate,up,
/// down}_proj`; Mixtral `block_sparse_moe.gate`, `…experts.E.{w1,w3,w2}`) as llama.cpp's
/// converter writes them: the router `blk.N.ffn_gate_inp` and the experts stacked into
/// `[experts, rows, cols]` tensors `blk.N.ffn_{gate,up,down}_exps`.
fn moe_tensors(
    c: &ModelConfig,
    weights: &HashMap<String, Tensor>,
) -> (Vec<(String, Tensor)>, Vec<String>) {
    let Some(m) = c.moe else {
        return (Vec::new(), Vec::new());
    };
    let (mut out, mut used) = (Vec::new(), Vec::new());
    for i in 0..c.num_hidden_layers {
        let (block, names) =
            match weights.contains_key(&format!("model.layers.{i}.mlp.gate.weight")) {
                true => ("mlp", ["gate_proj", "up_proj", "down_proj"]),
                false => ("block_sparse_moe", ["w1", "w3", "w2"]),
            };
        let p = format!("model.layers.{i}.{block}");
        used.push(format!("{p}.gate.weight"));
        out.push((
            format!("blk.{i}.ffn_gate_inp.weight"),
            weights[&format!("{p}.gate.weight")].clone(),
        ));
        for (hf, g) in names
            .iter()
            .zip(["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"])
        {
            let parts: Vec<Tensor> = (0..m.num_experts)
                .map(|e| {
                    let n = format!("{p}.experts.{e}.{hf}.weight");
                    used.push(n.clone());
                    weights[&n].clone()
                })
                .collect();
            out.push((
                format!("blk.{i}.{g}.weight"),
                Tensor::stack(&parts, 0).expect("stack experts"),
            ));
        }
    }
    (out, used)
}

/// [`write_gguf_with`] with the matrices (2- and 3-dimensional tensors whose rows are whole
/// blocks of `matrix_type`) stored as `matrix_type`; norms and the rest as F32.
pub fn write_gguf_typed(
    path: &Path,
    arch: &str,
    config: &ModelConfig,
    weights: &HashMap<String, Tensor>,
    matrix_type: GgmlDType,
    extra_tensors: Vec<(String, Tensor)>,
    extra_metadata: Vec<(String, Value)>,
) {
    let c = config;
    let permuted = matches!(arch, "llama" | "mistral");
    let gemma = arch == "gemma3";
    let typed = |t: &Tensor| {
        let dims = t.dims();
        let block = matrix_type.block_size();
        let dtype = match dims.len() >= 2 && dims[dims.len() - 1].is_multiple_of(block) {
            true => matrix_type,
            false => GgmlDType::F32,
        };
        QTensor::quantize(t, dtype).expect("qtensor")
    };
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let (moe, moe_names) = moe_tensors(c, weights);
    for (name, t) in &moe {
        tensors.push((name.clone(), typed(t)));
    }
    let mut names: Vec<&String> = weights.keys().filter(|n| !moe_names.contains(n)).collect();
    names.sort();
    for name in names {
        let mut t = weights[name].clone();
        if permuted && name.contains("self_attn.q_proj.") {
            t = permute(&t, c.num_attention_heads);
        } else if permuted && name.contains("self_attn.k_proj.") {
            t = permute(&t, c.num_key_value_heads);
        }
        let gguf = match gemma {
            // llama.cpp's converter stores Gemma's norm weights as 1 + w.
            true => {
                if name.ends_with("norm.weight") {
                    t = (t + 1.0).expect("norm + 1");
                }
                gguf_name_gemma3(name)
            }
            false => gguf_name(name),
        };
        tensors.push((gguf, typed(&t)));
    }
    for (name, t) in extra_tensors {
        tensors.push((
            name,
            QTensor::quantize(&t, GgmlDType::F32).expect("f32 qtensor"),
        ));
    }
    let k = |s: &str| format!("{arch}.{s}");
    let mut tokens: Vec<Value> = [
        "<unk>",
        "<s>",
        "</s>",
        "<|im_start|>",
        "<|im_end|>",
        "a",
        "b",
        "ab",
    ]
    .iter()
    .map(|t| Value::String(t.to_string()))
    .collect();
    tokens.extend((tokens.len()..c.vocab_size).map(|i| Value::String(format!("w{i}"))));
    let types: Vec<Value> = (0..c.vocab_size)
        .map(|i| Value::I32(if i < 5 { 3 } else { 1 }))
        .collect();
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (k("block_count"), Value::U32(c.num_hidden_layers as u32)),
        (k("embedding_length"), Value::U32(c.hidden_size as u32)),
        (
            k("feed_forward_length"),
            Value::U32(c.intermediate_size as u32),
        ),
        (
            k("attention.head_count"),
            Value::U32(c.num_attention_heads as u32),
        ),
        (
            k("attention.head_count_kv"),
            Value::U32(c.num_key_value_heads as u32),
        ),
        (k("attention.key_length"), Value::U32(c.head_dim as u32)),
        (k("attention.value_length"), Value::U32(c.head_dim as u32)),
        (
            k("attention.layer_norm_rms_epsilon"),
            Value::F32(c.rms_norm_eps as f32),
        ),
        (k("rope.freq_base"), Value::F32(c.rope_theta as f32)),
        (
            k("context_length"),
            Value::U32(c.max_position_embeddings as u32),
        ),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.tokens".into(), Value::Array(tokens)),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(vec![Value::String("a b".into())]),
        ),
        ("tokenizer.ggml.token_type".into(), Value::Array(types)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
    ];
    if let Some(m) = c.moe {
        md.push((k("expert_count"), Value::U32(m.num_experts as u32)));
        md.push((
            k("expert_used_count"),
            Value::U32(m.num_experts_per_tok as u32),
        ));
        md.push((
            k("expert_feed_forward_length"),
            Value::U32(m.moe_intermediate_size as u32),
        ));
    }
    // An extra entry replaces the key it names, else it is added.
    for (key, value) in extra_metadata {
        match md.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => md.push((key, value)),
        }
    }
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut f = std::fs::File::create(path).expect("create gguf");
    gguf_file::write(&mut f, &md_refs, &t_refs).expect("write gguf");
}

/// Dequantize every tensor of the GGUF at `gguf_path` (a `llama` model) to f32 and write it
/// into `dir` as a Hugging Face folder: config.json (LlamaForCausalLM), model.safetensors
/// with Q/K rows un-permuted, tokenizer.json (the GGUF's BPE tokenizer, saved by the
/// `tokenizers` crate) and tokenizer_config.json (chat template, BOS/EOS).
pub fn gguf_to_hf_folder(gguf_path: &Path, dir: &Path) -> ModelConfig {
    let mut gguf = GgufFile::open(gguf_path).expect("open gguf");
    let c = gguf.config().expect("gguf config");
    assert_eq!(
        c.architecture,
        Architecture::Llama,
        "this helper converts llama GGUFs"
    );
    let mut hf_names = vec![
        "model.embed_tokens.weight".to_string(),
        "model.norm.weight".to_string(),
        "lm_head.weight".to_string(),
    ];
    for i in 0..c.num_hidden_layers {
        for n in [
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
            "input_layernorm",
            "post_attention_layernorm",
        ] {
            hf_names.push(format!("model.layers.{i}.{n}.weight"));
        }
    }
    let gguf_names: Vec<String> = gguf.content.tensor_infos.keys().cloned().collect();
    let mut out: HashMap<String, Tensor> = HashMap::new();
    for g in gguf_names {
        let name = hf_name(&g, &hf_names);
        let mut t = gguf
            .qtensor(&g, &Device::Cpu)
            .expect("read")
            .dequantize(&Device::Cpu)
            .expect("dequantize");
        assert_eq!(t.dtype(), DType::F32);
        if name.contains("self_attn.q_proj.") {
            t = unpermute(&t, c.num_attention_heads);
        } else if name.contains("self_attn.k_proj.") {
            t = unpermute(&t, c.num_key_value_heads);
        }
        out.insert(name, t);
    }
    std::fs::create_dir_all(dir).expect("mkdir");
    candle_core::safetensors::save(&out, dir.join("model.safetensors")).expect("save safetensors");
    let bos = gguf.meta_u32("tokenizer.ggml.bos_token_id").ok();
    let eos = gguf.meta_u32("tokenizer.ggml.eos_token_id").ok();
    let config = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "max_position_embeddings": c.max_position_embeddings,
        "tie_word_embeddings": c.tie_word_embeddings,
        "hidden_act": "silu",
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float32",
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&config).expect("json"),
    )
    .expect("write");
    let tokenizer = Tokenizer::from_gguf(&gguf).expect("gguf tokenizer");
    tokenizer
        .inner
        .save(dir.join("tokenizer.json"), false)
        .expect("save tokenizer.json");
    let text = |id: Option<u32>| id.and_then(|i| tokenizer.inner.id_to_token(i));
    let tc = json!({
        "chat_template": gguf.meta_str("tokenizer.chat_template").ok(),
        "add_bos_token": tokenizer.add_bos.is_some(),
        "bos_token": text(bos),
        "eos_token": text(eos),
    });
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).expect("write");
    c
}

#[test]
fn permute_and_unpermute_are_inverse_and_pair_rows_i_and_i_plus_half() {
    // 2 heads of d = 4 rows, one column: row r holds r.
    let w = Tensor::arange(0f32, 8., &Device::Cpu)
        .and_then(|t| t.reshape((8, 1)))
        .expect("t");
    let p: Vec<f32> = permute(&w, 2)
        .flatten_all()
        .and_then(|t| t.to_vec1())
        .expect("v");
    // Head 0: HF rows (0, 2) then (1, 3); head 1: (4, 6) then (5, 7).
    assert_eq!(p, vec![0., 2., 1., 3., 4., 6., 5., 7.]);
    let back: Vec<f32> = unpermute(&permute(&w, 2), 2)
        .flatten_all()
        .and_then(|t| t.to_vec1())
        .expect("v");
    assert_eq!(back, (0..8).map(|x| x as f32).collect::<Vec<_>>());
}
