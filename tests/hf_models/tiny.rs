//! Tiny random-weight Hugging Face models written by the tests: config.json, safetensors
//! (f32, f16 or bf16), a WordLevel tokenizer.json and tokenizer_config.json.
use candle_core::{DType, Device, Tensor};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::pre_tokenizers::whitespace::Whitespace;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::AddedToken;

/// The architectures of issue 5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    /// Gemma 3 (issue 42); not in [`ALL`]: its oracle is only exact up to the window.
    Gemma3,
    /// Qwen3-MoE (issue 57): Qwen3's attention, 8 experts, 2 per token, renormalized.
    Qwen3Moe,
    /// Mixtral (issue 57): Llama's attention, 4 experts of `intermediate`, 2 per token.
    Mixtral,
}

pub const ALL: [Arch; 4] = [Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3];

/// Vocabulary size of every tiny model (the tokenizer has exactly these entries).
pub const VOCAB: usize = 64;
/// Token ids below this are special (`<unk>`, `<s>`, `</s>`, `<|im_start|>`, `<|im_end|>`).
pub const FIRST_WORD: u32 = 5;

/// The shape of one tiny model.
#[derive(Debug, Clone)]
pub struct Spec {
    pub arch: Arch,
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub max_pos: usize,
    pub tie: bool,
    /// Experts per layer and per token, and each expert's intermediate size (0: dense).
    pub experts: usize,
    pub experts_per_tok: usize,
    pub moe_intermediate: usize,
    pub rope_theta: f64,
    pub eps: f64,
    /// Safetensors dtype on disk.
    pub dtype: DType,
}

impl Spec {
    /// Llama: tied embeddings (as SmolLM2), BOS added by the tokenizer, f32.
    /// Mistral: untied, sliding window 48 (caps the context), f16 on disk.
    /// Qwen2: untied, QKV bias, f32. Qwen3: tied, head_dim 16 ≠ hidden/heads, q/k norm, bf16.
    pub fn of(arch: Arch) -> Spec {
        let base = Spec {
            arch,
            hidden: 32,
            intermediate: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
            max_pos: 128,
            tie: false,
            experts: 0,
            experts_per_tok: 0,
            moe_intermediate: 0,
            rope_theta: 10_000.0,
            eps: 1e-6,
            dtype: DType::F32,
        };
        match arch {
            Arch::Llama => Spec {
                tie: true,
                eps: 1e-5,
                ..base
            },
            Arch::Mistral => Spec {
                dtype: DType::F16,
                rope_theta: 1e6,
                ..base
            },
            Arch::Qwen2 => Spec {
                layers: 3,
                rope_theta: 1e6,
                ..base
            },
            Arch::Qwen3 => Spec {
                tie: true,
                head_dim: 16,
                rope_theta: 1e6,
                dtype: DType::BF16,
                ..base
            },
            // Untied, head_dim 16, 8 experts of 32 (whole blocks of 32 for a quantized
            // GGUF), 2 per token, renormalized; f32.
            Arch::Qwen3Moe => Spec {
                head_dim: 16,
                rope_theta: 1e6,
                experts: 8,
                experts_per_tok: 2,
                moe_intermediate: 32,
                ..base
            },
            // 4 experts of 32 (Mixtral's experts are `intermediate_size` wide), 2 per token.
            Arch::Mixtral => Spec {
                rope_theta: 1e6,
                intermediate: 32,
                experts: 4,
                experts_per_tok: 2,
                moe_intermediate: 32,
                ..base
            },
            // head_dim 32 ≠ hidden / heads, on the AVX2 attention kernels.
            Arch::Gemma3 => Spec {
                tie: true,
                layers: 3,
                head_dim: 32,
                max_pos: 512,
                rope_theta: 1e6,
                ..base
            },
        }
    }

    /// The Gemma 3 model's sliding window (tokens) and layer pattern (layers 0 and 2 slide,
    /// layer 1 is global).
    pub const GEMMA_WINDOW: usize = 16;
    pub const GEMMA_PATTERN: usize = 2;

    /// The Mistral model's sliding window (tokens).
    pub const MISTRAL_WINDOW: usize = 48;

    /// config.json as transformers writes it (and candle-transformers reads it).
    pub fn config_json(&self) -> Value {
        let name = match self.arch {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Mistral => "MistralForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
            Arch::Gemma3 => "Gemma3ForCausalLM",
            Arch::Qwen3Moe => "Qwen3MoeForCausalLM",
            Arch::Mixtral => "MixtralForCausalLM",
        };
        let model_type = match self.arch {
            Arch::Llama => "llama",
            Arch::Mistral => "mistral",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3_text",
            Arch::Qwen3Moe => "qwen3_moe",
            Arch::Mixtral => "mixtral",
        };
        let mut v = json!({
            "architectures": [name],
            "model_type": model_type,
            "vocab_size": VOCAB,
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "max_position_embeddings": self.max_pos,
            "rms_norm_eps": self.eps,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie,
            "hidden_act": "silu",
            "bos_token_id": 1,
            "eos_token_id": 2,
            "torch_dtype": match self.dtype { DType::BF16 => "bfloat16", DType::F16 => "float16", _ => "float32" },
        });
        let extra = match self.arch {
            Arch::Llama => json!({"rope_scaling": null, "attention_bias": false}),
            Arch::Mistral => json!({"sliding_window": Spec::MISTRAL_WINDOW, "head_dim": null}),
            Arch::Qwen2 => {
                json!({"sliding_window": 128, "max_window_layers": 3, "use_sliding_window": false, "eos_token_id": 4})
            }
            Arch::Qwen3 => {
                json!({"head_dim": self.head_dim, "attention_bias": false, "sliding_window": null,
                "max_window_layers": 2, "use_sliding_window": false, "eos_token_id": 4, "rope_scaling": null})
            }
            Arch::Qwen3Moe => {
                json!({"head_dim": self.head_dim, "attention_bias": false, "sliding_window": null,
                "max_window_layers": 2, "use_sliding_window": false, "eos_token_id": 4, "rope_scaling": null,
                "decoder_sparse_step": 1, "mlp_only_layers": [], "num_experts": self.experts,
                "num_experts_per_tok": self.experts_per_tok, "moe_intermediate_size": self.moe_intermediate,
                "norm_topk_prob": true})
            }
            // candle's Mixtral wants a window: one past the context changes nothing.
            Arch::Mixtral => {
                json!({"sliding_window": 4096, "num_local_experts": self.experts,
                "num_experts_per_tok": self.experts_per_tok, "use_flash_attn": false})
            }
            // query_pre_attn_scalar = head_dim: candle-transformers scales by head_dim^−½.
            Arch::Gemma3 => {
                json!({"head_dim": self.head_dim, "attention_bias": false,
                "hidden_activation": "gelu_pytorch_tanh", "hidden_act": null,
                "sliding_window": Spec::GEMMA_WINDOW, "sliding_window_pattern": Spec::GEMMA_PATTERN,
                "query_pre_attn_scalar": self.head_dim, "rope_local_base_freq": 10000.0,
                "final_logit_softcapping": null, "attn_logit_softcapping": null,
                "rope_scaling": null, "eos_token_id": 2})
            }
        };
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        v
    }
}

/// A deterministic generator (SplitMix64) so every run writes the same weights.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// `n` token ids among the ordinary words.
    pub fn tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| FIRST_WORD + (self.next_u64() % (VOCAB as u64 - FIRST_WORD as u64)) as u32)
            .collect()
    }
}

fn tensor(rng: &mut Rng, shape: &[usize], scale: f32, offset: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| offset + scale * rng.unit()).collect();
    Tensor::from_vec(data, shape, &Device::Cpu).expect("tensor")
}

/// Random weights for `spec`, named as transformers names them, in f32.
pub fn weights(spec: &Spec, seed: u64) -> HashMap<String, Tensor> {
    let mut rng = Rng::new(seed);
    let s = spec;
    let (h, d) = (s.hidden, s.head_dim);
    let mut w = HashMap::new();
    let lin_scale = |fan_in: usize| 1.5 / (fan_in as f32).sqrt();
    w.insert(
        "model.embed_tokens.weight".to_string(),
        tensor(&mut rng, &[VOCAB, h], 1.0, 0.0),
    );
    for i in 0..s.layers {
        let p = format!("model.layers.{i}");
        let mut put = |name: &str, shape: &[usize], scale: f32, offset: f32| {
            w.insert(
                format!("{p}.{name}"),
                tensor(&mut rng, shape, scale, offset),
            );
        };
        put(
            "self_attn.q_proj.weight",
            &[s.heads * d, h],
            lin_scale(h),
            0.0,
        );
        put(
            "self_attn.k_proj.weight",
            &[s.kv_heads * d, h],
            lin_scale(h),
            0.0,
        );
        put(
            "self_attn.v_proj.weight",
            &[s.kv_heads * d, h],
            lin_scale(h),
            0.0,
        );
        put(
            "self_attn.o_proj.weight",
            &[h, s.heads * d],
            lin_scale(s.heads * d),
            0.0,
        );
        if s.experts == 0 {
            put(
                "mlp.gate_proj.weight",
                &[s.intermediate, h],
                lin_scale(h),
                0.0,
            );
            put(
                "mlp.up_proj.weight",
                &[s.intermediate, h],
                lin_scale(h),
                0.0,
            );
            put(
                "mlp.down_proj.weight",
                &[h, s.intermediate],
                lin_scale(s.intermediate),
                0.0,
            );
        } else {
            let (block, [gate, up, down]) = match s.arch {
                Arch::Mixtral => ("block_sparse_moe", ["w1", "w3", "w2"]),
                _ => ("mlp", ["gate_proj", "up_proj", "down_proj"]),
            };
            let f = s.moe_intermediate;
            // A router with spread logits: the top-2 choice is clear of ties.
            put(
                &format!("{block}.gate.weight"),
                &[s.experts, h],
                4.0 * lin_scale(h),
                0.0,
            );
            for e in 0..s.experts {
                let x = format!("{block}.experts.{e}");
                put(&format!("{x}.{gate}.weight"), &[f, h], lin_scale(h), 0.0);
                put(&format!("{x}.{up}.weight"), &[f, h], lin_scale(h), 0.0);
                put(&format!("{x}.{down}.weight"), &[h, f], lin_scale(f), 0.0);
            }
        }
        // Gemma's norms scale by 1 + w: weights around 0.
        let norm_offset = if s.arch == Arch::Gemma3 { 0.0 } else { 1.0 };
        put("input_layernorm.weight", &[h], 0.2, norm_offset);
        put("post_attention_layernorm.weight", &[h], 0.2, norm_offset);
        if s.arch == Arch::Gemma3 {
            put("pre_feedforward_layernorm.weight", &[h], 0.2, 0.0);
            put("post_feedforward_layernorm.weight", &[h], 0.2, 0.0);
            put("self_attn.q_norm.weight", &[d], 0.2, 0.0);
            put("self_attn.k_norm.weight", &[d], 0.2, 0.0);
        }
        if s.arch == Arch::Qwen2 {
            put("self_attn.q_proj.bias", &[s.heads * d], 0.5, 0.0);
            put("self_attn.k_proj.bias", &[s.kv_heads * d], 0.5, 0.0);
            put("self_attn.v_proj.bias", &[s.kv_heads * d], 0.5, 0.0);
        }
        if matches!(s.arch, Arch::Qwen3 | Arch::Qwen3Moe) {
            put("self_attn.q_norm.weight", &[d], 0.2, 1.0);
            put("self_attn.k_norm.weight", &[d], 0.2, 1.0);
        }
    }
    let final_offset = if s.arch == Arch::Gemma3 { 0.0 } else { 1.0 };
    w.insert(
        "model.norm.weight".to_string(),
        tensor(&mut rng, &[h], 0.2, final_offset),
    );
    if !s.tie {
        w.insert(
            "lm_head.weight".to_string(),
            tensor(&mut rng, &[VOCAB, h], lin_scale(h) * 2.0, 0.0),
        );
    }
    w
}

/// The vocabulary: five special tokens, then `w5` ... `w63`.
pub fn vocab_words() -> Vec<String> {
    let special = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"];
    let mut v: Vec<String> = special.iter().map(|s| s.to_string()).collect();
    v.extend((FIRST_WORD as usize..VOCAB).map(|i| format!("w{i}")));
    v
}

/// A WordLevel tokenizer over `words` (id = position), whitespace-split, `<unk>` for the
/// rest.
pub fn word_level(words: Vec<String>) -> tokenizers::Tokenizer {
    let vocab = words.into_iter().zip(0u32..).collect();
    let model = WordLevel::builder()
        .vocab(vocab)
        .unk_token("<unk>".into())
        .build()
        .expect("wordlevel");
    let mut tok = tokenizers::Tokenizer::new(model);
    tok.with_pre_tokenizer(Some(Whitespace {}));
    tok
}

/// A WordLevel tokenizer over [`vocab_words`], whitespace-split; with `bos`, a
/// `TemplateProcessing` post-processor puts `<s>` first, as Llama's tokenizer.json does.
pub fn write_tokenizer(path: &Path, bos: bool) {
    let mut tok = word_level(vocab_words());
    let special: Vec<AddedToken> = vocab_words()[..FIRST_WORD as usize]
        .iter()
        .map(|t| AddedToken::from(t.clone(), true))
        .collect();
    tok.add_special_tokens(&special);
    if bos {
        let tp = TemplateProcessing::builder()
            .try_single("<s> $A")
            .expect("template")
            .special_tokens(vec![("<s>", 1)])
            .build()
            .expect("template");
        tok.with_post_processor(Some(tp));
    }
    tok.save(path, false).expect("save tokenizer.json");
}

/// ChatML, as Qwen's tokenizer_config.json carries it.
pub const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Write the whole folder for `spec` into `dir`: config.json, model.safetensors (in
/// `spec.dtype`), tokenizer.json, tokenizer_config.json. Returns the f32 weights.
pub fn write_folder(dir: &Path, spec: &Spec, seed: u64) -> HashMap<String, Tensor> {
    std::fs::create_dir_all(dir).expect("mkdir");
    let w = weights(spec, seed);
    let on_disk: HashMap<String, Tensor> = w
        .iter()
        .map(|(k, t)| (k.clone(), t.to_dtype(spec.dtype).expect("dtype")))
        .collect();
    candle_core::safetensors::save(&on_disk, dir.join("model.safetensors"))
        .expect("save safetensors");
    let cfg = serde_json::to_string_pretty(&spec.config_json()).expect("json");
    std::fs::write(dir.join("config.json"), cfg).expect("write config.json");
    write_tokenizer(&dir.join("tokenizer.json"), spec.arch == Arch::Llama);
    let tc = json!({"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": null});
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string())
        .expect("write tokenizer_config.json");
    // What the model computes with: the on-disk values, back in f32.
    on_disk
        .into_iter()
        .map(|(k, t)| (k, t.to_dtype(DType::F32).expect("f32")))
        .collect()
}
