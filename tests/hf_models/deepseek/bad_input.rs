//! Bad DeepSeek files get one line naming the key or tensor: a `kv_lora_rank` of 0, RoPE
//! dimensions that do not fit the key, a missing latent up-projection, a gating function
//! nanollm does not know — as a GGUF and as a config.json.
use super::tiny::{write_folder, write_gguf, Shape};
use candle_core::quantized::gguf_file::Value;
use nanollm::model::source;
use std::path::Path;

/// Metadata replaced, tensors left out, what the error must say.
type Case<'a> = (&'a [(&'a str, Value)], &'a [&'a str], &'a str);

fn load_error(path: &Path) -> String {
    match source::load(path, &candle_core::Device::Cpu, true) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => format!("{e:#}"),
    }
}

fn one_line(err: &str, want: &str) {
    assert!(!err.contains('\n'), "more than one line: {err}");
    assert!(err.contains(want), "{err:?} does not say {want:?}");
}

#[test]
fn bad_deepseek_ggufs_name_the_key_or_tensor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Shape::v3();
    let w = write_folder(&dir.path().join("folder"), &s, 58);
    let cases: [Case; 5] = [
        (
            &[("deepseek2.attention.kv_lora_rank", Value::U32(0))],
            &[],
            "deepseek2.attention.kv_lora_rank is 0",
        ),
        (
            &[("deepseek2.rope.dimension_count", Value::U32(64))],
            &[],
            "deepseek2.rope.dimension_count is 64 but deepseek2.attention.key_length_mla is 64",
        ),
        (
            &[("deepseek2.expert_gating_func", Value::U32(3))],
            &[],
            "deepseek2.expert_gating_func is 3: a gating function nanollm does not know",
        ),
        (
            &[],
            &["blk.1.attn_k_b.weight"],
            "tensor blk.1.attn_k_b.weight is missing",
        ),
        (&[], &["blk.2.attn_v_b.weight"], "blk.2.attn_v_b.weight"),
    ];
    for (i, (edit, skip, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad-{i}.gguf"));
        write_gguf(&path, &s, &w, false, edit, skip);
        one_line(&load_error(&path), want);
    }
}

/// Numbers a damaged file can carry that would run silently, misnamed or past f32: each is
/// refused with its GGUF key (found by a helper hunting damaged files).
#[test]
fn out_of_range_deepseek_keys_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v3 = Shape::v3();
    let w3 = write_folder(&dir.path().join("v3"), &v3, 58);
    let v3_cases: [Case; 5] = [
        (
            &[("deepseek2.expert_group_count", Value::U32(3))],
            &[],
            "deepseek2.expert_group_count 3 and deepseek2.expert_group_used_count 2",
        ),
        (
            &[("deepseek2.expert_weights_scale", Value::F32(f32::NAN))],
            &[],
            "deepseek2.expert_weights_scale is NaN",
        ),
        (
            &[("deepseek2.leading_dense_block_count", Value::U32(9))],
            &[],
            "deepseek2.leading_dense_block_count is 9, more than the 3 layers",
        ),
        (
            &[("deepseek2.attention.key_length_mla", Value::U32(65))],
            &[],
            "deepseek2.attention.key_length_mla is 65: an even key width is needed",
        ),
        (
            &[("deepseek2.attention.kv_lora_rank", Value::U32(1 << 20))],
            &[],
            "deepseek2.attention.kv_lora_rank is 1048576, more than 65536",
        ),
    ];
    for (i, (edit, skip, want)) in v3_cases.iter().enumerate() {
        let path = dir.path().join(format!("v3-{i}.gguf"));
        write_gguf(&path, &v3, &w3, false, edit, skip);
        one_line(&load_error(&path), want);
    }
    let v2 = Shape::v2();
    let w2 = write_folder(&dir.path().join("v2"), &v2, 58);
    let v2_cases: [Case; 2] = [
        (
            &[(
                "deepseek2.rope.scaling.yarn_log_multiplier",
                Value::F32(1e38),
            )],
            &[],
            "deepseek2.rope.scaling.yarn_log_multiplier is",
        ),
        (
            &[(
                "deepseek2.rope.scaling.original_context_length",
                Value::U32(0),
            )],
            &[],
            "deepseek2.rope.scaling.original_context_length is 0",
        ),
    ];
    for (i, (edit, skip, want)) in v2_cases.iter().enumerate() {
        let path = dir.path().join(format!("v2-{i}.gguf"));
        write_gguf(&path, &v2, &w2, false, edit, skip);
        one_line(&load_error(&path), want);
    }
}

#[test]
fn bad_deepseek_configs_name_the_field() {
    let cases = [
        ("kv_lora_rank", serde_json::json!(0), "kv_lora_rank is 0"),
        (
            "qk_rope_head_dim",
            serde_json::json!(7),
            "qk_rope_head_dim 7",
        ),
        (
            "scoring_func",
            serde_json::json!("softplus"),
            "scoring_func is \"softplus\"",
        ),
        (
            "topk_method",
            serde_json::json!("random"),
            "topk_method is \"random\"",
        ),
        (
            "qk_nope_head_dim",
            serde_json::json!(33),
            "qk_nope_head_dim is 33: an even width is needed",
        ),
        (
            "first_k_dense_replace",
            serde_json::json!(5),
            "first_k_dense_replace is 5, more than the 3 layers",
        ),
        (
            "rope_scaling",
            serde_json::json!({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                "mscale": 0.707, "mscale_all_dim": -20.0}),
            "rope_scaling.mscale_all_dim is -20",
        ),
    ];
    for (key, value, want) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        write_folder(dir.path(), &Shape::v2(), 58);
        let path = dir.path().join("config.json");
        let mut cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        cfg[key] = value;
        std::fs::write(&path, cfg.to_string()).expect("write");
        one_line(&load_error(dir.path()), want);
    }
    // The fused kv_b_proj missing from the checkpoint.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut w = write_folder(dir.path(), &Shape::v2(), 58);
    w.remove("model.layers.1.self_attn.kv_b_proj.weight");
    candle_core::safetensors::save(&w, dir.path().join("model.safetensors")).expect("save");
    one_line(
        &load_error(dir.path()),
        "model.layers.1.self_attn.kv_b_proj.weight",
    );
}
