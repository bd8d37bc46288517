//! config.json layouts against hand-computed specs.
use super::*;
use crate::sizing::spec::LayerGroup;
use serde_json::json;

fn spec(v: Value) -> KvSpec {
    KvSpec::from_config_json(&v).unwrap()
}

fn err(v: Value) -> String {
    KvSpec::from_config_json(&v).unwrap_err().to_string()
}

fn full(kv: usize, hd: usize, layers: u64) -> LayerGroup {
    LayerGroup {
        kind: LayerKind::FullAttention {
            num_key_value_heads: kv,
            head_dim: hd,
        },
        layers,
    }
}

#[test]
fn kv_heads_default_to_heads_and_head_dim_to_hidden_over_heads() {
    let s = spec(json!({"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096}));
    assert_eq!(s.groups, vec![full(32, 128, 32)]);
    // An explicit head_dim wins (Qwen3, Gemma).
    let s = spec(
        json!({"num_hidden_layers": 2, "num_attention_heads": 64, "num_key_value_heads": 8, "hidden_size": 5120, "head_dim": 128}),
    );
    assert_eq!(s.groups, vec![full(8, 128, 2)]);
    // GPT-2 names; Falcon's multi_query.
    let s = spec(json!({"n_layer": 12, "n_head": 12, "n_embd": 768}));
    assert_eq!(s.groups, vec![full(12, 64, 12)]);
    let s = spec(
        json!({"num_hidden_layers": 32, "num_attention_heads": 71, "hidden_size": 4544, "multi_query": true}),
    );
    assert_eq!(s.groups, vec![full(1, 64, 32)]);
}

#[test]
fn qwen2_windows_only_layers_from_max_window_layers_when_enabled() {
    let base = json!({"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 256,
        "sliding_window": 100, "max_window_layers": 3, "use_sliding_window": true});
    let s = spec(base.clone());
    assert_eq!(s.groups[0], full(4, 64, 3));
    assert_eq!(s.groups[1].layers, 1);
    let mut off = base.clone();
    off["use_sliding_window"] = json!(false);
    assert_eq!(spec(off).groups, vec![full(4, 64, 4)]);
    // Absent, a Qwen config's flag is false (Qwen2Config's default): no layer windowed;
    // another model type applies sliding_window (Mistral has no flag).
    let mut absent = base;
    absent
        .as_object_mut()
        .map(|o| o.remove("use_sliding_window"));
    absent["model_type"] = json!("qwen2");
    assert_eq!(spec(absent.clone()).groups, vec![full(4, 64, 4)]);
    absent["model_type"] = json!("mistral");
    absent
        .as_object_mut()
        .map(|o| o.remove("max_window_layers"));
    absent["num_key_value_heads"] = json!(4);
    assert_eq!(spec(absent).groups[0].layers, 4);
}

/// The hybrid models' own per-layer lists: only their attention layers hold K/V
/// (Nemotron-H `*`, MiniMax-Text-01 `1`, Zamba2 `hybrid`, with Zamba2's
/// attention_head_dim); every layer counted as attention overstated them 6–10×.
#[test]
fn hybrid_layer_lists_count_only_their_attention_layers() {
    let n = spec(json!({"model_type": "nemotron_h", "num_hidden_layers": 8,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_size": 4096, "hybrid_override_pattern": "M-M*-ME*"}));
    assert!(n.groups.contains(&full(8, 128, 2)), "{:?}", n.groups);
    assert_eq!(n.groups.iter().map(|g| g.layers).sum::<u64>(), 8);
    let m = spec(json!({"num_hidden_layers": 4, "num_attention_heads": 64,
        "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 6144,
        "attn_type_list": [0, 0, 0, 1]}));
    assert!(m.groups.contains(&full(8, 128, 1)), "{:?}", m.groups);
    let z = spec(json!({"num_hidden_layers": 3, "num_attention_heads": 32,
        "num_key_value_heads": 32, "attention_head_dim": 160, "hidden_size": 2560,
        "layers_block_type": ["mamba", "hybrid", "mamba"]}));
    assert!(z.groups.contains(&full(32, 160, 1)), "{:?}", z.groups);
    assert!(err(json!({"num_hidden_layers": 3, "num_attention_heads": 4,
        "hidden_size": 64, "hybrid_override_pattern": "M*"}))
    .contains("hybrid_override_pattern has 2 entries but there are 3 layers"));
}

/// Falcon-H1's parallel Mamba-2 state (every layer) is named as not counted, not left
/// out silently.
#[test]
fn falcon_h1_names_its_uncounted_mamba_state() {
    let s = spec(json!({"model_type": "falcon_h1", "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
        "hidden_size": 512}));
    assert_eq!(s.groups, vec![full(2, 64, 4)]);
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("Mamba-2 state") && n.contains("not counted")),
        "{:?}",
        s.notes
    );
}

/// Missing num_key_value_heads / head_dim take the model type's transformers default where
/// the class has one (MistralConfig num_key_value_heads = 8; Gemma2Config 16 and head_dim
/// 256), not the MHA / hidden ÷ heads rule.
#[test]
fn missing_kv_heads_and_head_dim_take_the_model_types_defaults() {
    let m = spec(json!({"model_type": "mistral", "num_hidden_layers": 32,
        "num_attention_heads": 32, "hidden_size": 4096}));
    assert_eq!(m.groups, vec![full(8, 128, 32)]);
    let g = spec(json!({"model_type": "gemma2", "num_hidden_layers": 2,
        "num_attention_heads": 16, "num_key_value_heads": 8, "hidden_size": 3584}));
    assert_eq!(g.groups, vec![full(8, 256, 2)]);
    let l = spec(json!({"model_type": "llama", "num_hidden_layers": 2,
        "num_attention_heads": 32, "hidden_size": 4096}));
    assert_eq!(l.groups, vec![full(32, 128, 2)]);
}

#[test]
fn text_config_is_used_for_multimodal_configs() {
    let s = spec(
        json!({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text",
        "num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "hidden_size": 2560, "sliding_window": 1024}}),
    );
    assert_eq!(s.groups.len(), 2);
    assert_eq!(s.groups[0].layers, 10); // sliding
    assert_eq!(s.groups[1], full(4, 256, 2));
}

#[test]
fn bad_configs_name_the_field() {
    assert!(err(json!({"hidden_size": 64})).contains("no num_hidden_layers"));
    assert!(err(json!([1, 2])).contains("not a JSON object"));
    assert!(err(json!({"num_hidden_layers": -1})).contains("num_hidden_layers is -1"));
    assert!(err(json!({"num_hidden_layers": 0})).contains("num_hidden_layers is 0"));
    assert!(err(json!({"num_hidden_layers": 1e9})).contains("more than"));
    assert!(err(json!({"num_hidden_layers": 2})).contains("num_attention_heads"));
    assert!(err(
        json!({"num_hidden_layers": 2, "model_type": "deepseek_v2", "kv_lora_rank": null})
    )
    .contains("has no kv_lora_rank"));
    let types = json!({"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8,
        "layer_types": ["full_attention"]});
    assert!(err(types).contains("layer_types has 1 entries"));
    let types = json!({"num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 8,
        "layer_types": ["warp_attention"]});
    assert!(err(types).contains("warp_attention"));
    let types = json!({"num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 8,
        "layer_types": ["sliding_attention"]});
    assert!(err(types).contains("sliding_window is missing"));
}
