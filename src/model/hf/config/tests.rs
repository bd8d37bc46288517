use super::*;
use serde_json::json;

/// The runtime's window rule agrees with kv-size's parser (the oracle) on the configs the
/// four families ship.
#[test]
fn window_rule_matches_kv_size() -> Result<()> {
    use crate::sizing::spec::{KvSpec, LayerKind};
    let base = json!({"num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "hidden_size": 64});
    let variants = [
        json!({}),
        json!({"sliding_window": null}),
        json!({"sliding_window": 4096}),
        json!({"sliding_window": 4096, "use_sliding_window": false}),
        json!({"sliding_window": 4096, "use_sliding_window": true}),
        json!({"sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 2}),
        json!({"sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 4}),
        json!({"sliding_window": 512, "layer_types": ["full_attention", "sliding_attention", "full_attention", "full_attention"]}),
        json!({"sliding_window": 512, "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention"]}),
    ];
    for v in variants {
        let mut cfg = base.clone();
        for (k, val) in v.as_object().into_iter().flatten() {
            cfg[k] = val.clone();
        }
        let spec = KvSpec::from_config_json(&cfg)?;
        let want = spec
            .groups
            .iter()
            .filter_map(|g| match g.kind {
                LayerKind::SlidingWindow { window, .. } => Some(window as usize),
                _ => None,
            })
            .min();
        let sliding_layers: u64 = spec
            .groups
            .iter()
            .filter(|g| matches!(g.kind, LayerKind::SlidingWindow { .. }))
            .map(|g| g.layers)
            .sum();
        let map = cfg.as_object().cloned().unwrap_or_default();
        let ours = layer_windows(&Fields(&map), 4)?;
        assert_eq!(ours.iter().flatten().copied().min(), want, "{cfg}");
        assert_eq!(
            ours.iter().flatten().count() as u64,
            sliding_layers,
            "{cfg}"
        );
    }
    Ok(())
}

fn qwen3() -> Value {
    json!({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 151936, "hidden_size": 1024,
        "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
        "max_position_embeddings": 40960, "tie_word_embeddings": true, "eos_token_id": 151645,
        "sliding_window": null, "use_sliding_window": false, "torch_dtype": "bfloat16"})
}

#[test]
fn qwen3_0_6b() -> Result<()> {
    let c = parse(&qwen3())?;
    assert_eq!(c.config.architecture, Architecture::Qwen3);
    assert_eq!((c.config.head_dim, c.config.num_key_value_heads), (128, 8));
    assert!(c.config.qk_norm && !c.config.attention_bias && !c.config.rope_interleaved);
    assert_eq!(c.config.max_position_embeddings, 40960);
    assert_eq!(c.eos_token_ids, vec![151645]);
    assert_eq!(c.torch_dtype.as_deref(), Some("bfloat16"));
    Ok(())
}

/// Llama-3.2-1B's published config.json, with its RoPE settings spelled the
/// transformers-4 way (`rope_theta` + `rope_scaling`) and the transformers-5 way
/// (`rope_parameters` holding `rope_theta`): the same inverse frequencies, the values
/// issue 14 lists (relative 1e-6).
#[test]
fn llama_3_2_1b_rope_in_both_spellings() -> Result<()> {
    let scaling = json!({"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192, "rope_type": "llama3"});
    let base = json!({"architectures": ["LlamaForCausalLM"], "vocab_size": 128256,
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": true});
    let mut v4 = base.clone();
    v4["rope_theta"] = json!(500000.0);
    v4["rope_scaling"] = scaling.clone();
    let mut v5 = base;
    let mut params = scaling;
    params["rope_theta"] = json!(500000.0);
    v5["rope_parameters"] = params;
    for v in [v4, v5] {
        let (f, attention) = parse(&v)?.config.rope_inv_freq();
        assert_eq!((f.len(), attention), (32, 1.0));
        for (i, want) in [
            (14, 3.2114459948e-3),
            (15, 1.2905479282e-3),
            (18, 1.9461638185e-5),
            (31, 9.4183067254e-8),
        ] {
            assert!((f[i] - want).abs() <= 1e-6 * want, "inv_freq[{i}] {}", f[i]);
        }
    }
    Ok(())
}

#[test]
fn mistral_slides_on_every_layer_and_keeps_its_context() -> Result<()> {
    let v = json!({"architectures": ["MistralForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "max_position_embeddings": 32768, "sliding_window": 4096,
        "eos_token_id": [2, 3]});
    let c = parse(&v)?;
    assert_eq!(c.config.max_position_embeddings, 32768);
    assert_eq!(c.config.layer_windows, vec![Some(4096); 32]);
    assert_eq!(c.eos_token_ids, vec![2, 3]);
    Ok(())
}

#[test]
fn unsupported_architecture_names_itself_and_the_list() {
    let mut v = qwen3();
    v["architectures"] = json!(["GemmaForCausalLM"]);
    let e = format!("{:#}", parse(&v).unwrap_err());
    assert!(
        e.contains("GemmaForCausalLM")
            && e.contains("Qwen3ForCausalLM")
            && e.contains("LlamaForCausalLM"),
        "{e}"
    );
}

#[test]
fn missing_and_mistyped_fields_are_named() {
    let mut v = qwen3();
    v.as_object_mut().map(|o| o.remove("hidden_size"));
    assert!(format!("{:#}", parse(&v).unwrap_err()).contains("hidden_size"));
    let mut v = qwen3();
    v["rope_scaling"] = json!({"rope_type": "dynamic", "factor": 4.0});
    assert!(format!("{:#}", parse(&v).unwrap_err()).contains("dynamic"));
}
