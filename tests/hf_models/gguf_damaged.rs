//! Damaged GGUF files — each one a change of a tiny llama GGUF that loads — are refused at
//! load time with one error naming the file's fault, as llama.cpp's loader refuses them,
//! where they used to panic at the first forward pass or run with wrong output.
use crate::gguf_write::{write_gguf, write_gguf_with};
use crate::tiny::{self, Arch, Spec};
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use nanollm::model::source;
use std::path::Path;

/// The load error of `path` (panics if it loads).
fn load_error(path: &Path) -> String {
    match source::load(path, &Device::Cpu, false) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => format!("{e:#}"),
    }
}

fn assert_refused(path: &Path, want: &str) {
    let e = load_error(path);
    assert!(e.contains(want), "{}: {e}", path.display());
    assert!(!e.contains('\n'), "one line: {e}");
}

/// A small GGUF with one f32 tensor named `weird.weight` and the given metadata.
fn small_gguf(path: &Path, md: &[(&str, Value)]) {
    let t = QTensor::quantize(
        &Tensor::zeros((2, 32), candle_core::DType::F32, &Device::Cpu).expect("zeros"),
        GgmlDType::F32,
    )
    .expect("qtensor");
    let md: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (*k, v)).collect();
    let mut f = std::fs::File::create(path).expect("create");
    gguf_file::write(&mut f, &md, &[("weird.weight", &t)]).expect("write");
}

#[test]
fn damaged_gguf_files_are_refused_with_one_clear_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let spec = Spec::of(Arch::Llama);
    let hf = d.join("hf");
    let weights = tiny::write_folder(&hf, &spec, 5);
    let config = source::load(&hf, &Device::Cpu, false)
        .expect("tiny folder")
        .config()
        .clone();
    let good = d.join("good.gguf");
    write_gguf(&good, "llama", &config, &weights);
    source::load(&good, &Device::Cpu, false).expect("the undamaged file loads");
    // The tiny model with one metadata entry replaced (or added).
    let with_meta = |name: &str, key: &str, value: Value| {
        let p = d.join(format!("{name}.gguf"));
        write_gguf_with(
            &p,
            "llama",
            &config,
            &weights,
            Vec::new(),
            vec![(key.into(), value)],
        );
        p
    };

    // A matrix with the wrong number of rows (was: a panic at the first forward pass, or
    // wrong output for the FFN, output and V matrices).
    let mut w = weights.clone();
    let q = "model.layers.1.self_attn.q_proj.weight";
    w.insert(
        q.into(),
        Tensor::zeros((16, spec.hidden), candle_core::DType::F32, &Device::Cpu).expect("zeros"),
    );
    let p = d.join("q_rows.gguf");
    write_gguf(&p, "llama", &config, &w);
    assert_refused(
        &p,
        "tensor blk.1.attn_q.weight has shape [16, 32], expected [32, 32]",
    );

    // Metadata of the wrong type is refused, not replaced by a default (head_count_kv as a
    // string was: 4 KV heads and a panic).
    let p = with_meta(
        "kv_str",
        "llama.attention.head_count_kv",
        Value::String("2".into()),
    );
    assert_refused(
        &p,
        "GGUF key llama.attention.head_count_kv is a string, expected an integer",
    );
    // An integer past u32 is refused, not truncated (2^32 + 16 was a context of 16).
    let p = with_meta(
        "ctx_u64",
        "llama.context_length",
        Value::U64((1 << 32) + 16),
    );
    assert_refused(
        &p,
        "GGUF key llama.context_length is 4294967312, outside 0 to 2^32 − 1",
    );
    // Layers past block_count (was: silently ignored).
    let p = with_meta("blocks", "llama.block_count", Value::U32(1));
    assert_refused(&p, "tensor blk.1.");
    assert_refused(&p, "is past llama.block_count 1");
    // A special token past the vocabulary (was: accepted; the EOS never matched).
    let p = with_meta("eos_oob", "tokenizer.ggml.eos_token_id", Value::U32(1000));
    assert_refused(
        &p,
        "tokenizer.ggml.eos_token_id is 1000, past the vocabulary of 64 tokens",
    );
    // A RoPE base stored as an integer is that base (it was replaced by 10000).
    let p = with_meta("theta_u32", "llama.rope.freq_base", Value::U32(100_000));
    let m = source::load(&p, &Device::Cpu, false).expect("an integer RoPE base loads");
    assert_eq!(m.config().rope_theta, 100_000.0);

    // Header faults llama.cpp's reader refuses and candle's does not (or panics on).
    let arch = Value::String("llama".into());
    let p = d.join("dup_key.gguf");
    small_gguf(
        &p,
        &[
            ("general.architecture", arch.clone()),
            ("general.architecture", arch.clone()),
        ],
    );
    assert_refused(&p, "metadata key general.architecture appears twice");
    let p = d.join("align0.gguf");
    small_gguf(
        &p,
        &[
            ("general.architecture", arch.clone()),
            ("general.alignment", Value::U32(0)),
        ],
    );
    assert_refused(&p, "general.alignment is 0: it must be a power of two");
    // The tensor's ggml type patched to 16 (IQ2_XXS): named, not "corrupt header".
    let p = d.join("iq2.gguf");
    small_gguf(&p, &[("general.architecture", arch.clone())]);
    let mut bytes = std::fs::read(&p).expect("read");
    let at = bytes
        .windows(12)
        .position(|w| w == b"weird.weight")
        .expect("the tensor name")
        + 12;
    // n_dims (u32 = 2), two u64 dims, then the type.
    let ty = at + 4 + 16;
    bytes[ty..ty + 4].copy_from_slice(&16u32.to_le_bytes());
    std::fs::write(&p, &bytes).expect("write");
    assert_refused(
        &p,
        "tensor weird.weight is IQ2_XXS (ggml type 16), a type nanollm's kernels do not run (they run F32, F16, BF16, Q4_0",
    );
    // Version 1.
    let mut v1 = bytes.clone();
    v1[4..8].copy_from_slice(&1u32.to_le_bytes());
    let p = d.join("v1.gguf");
    std::fs::write(&p, &v1).expect("write");
    assert_refused(&p, "GGUF version 1 is not supported");
    // A pipe with no writer (opening it would wait forever) and a device.
    let fifo = d.join("fifo.gguf");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    assert_refused(&fifo, "fifo.gguf is not a regular file");
    assert_refused(Path::new("/dev/null"), "/dev/null is not a regular file");
}

/// A Hugging Face folder whose checkpoint and config.json disagree: a bias tensor the config
/// does not call for is not used (transformers builds Llama's o_proj and MLP with
/// `attention_bias` / `mlp_bias`; it was added to the output), and layers past
/// `num_hidden_layers` are refused (they were dropped without a word).
#[test]
fn hf_checkpoint_and_config_disagreements() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = Spec::of(Arch::Llama);
    let weights = tiny::write_folder(dir.path(), &spec, 9);
    let prompt = [5u32, 9, 12, 7];
    let logits = |m: &nanollm::model::Loaded| crate::ours::naive(m, &prompt, &[11, 6]);
    let want = logits(&crate::ours::load(dir.path(), None));
    let mut w = weights.clone();
    for name in [
        "model.layers.0.self_attn.o_proj.bias",
        "model.layers.1.mlp.down_proj.bias",
    ] {
        w.insert(
            name.into(),
            Tensor::full(5f32, spec.hidden, &Device::Cpu).expect("bias"),
        );
    }
    candle_core::safetensors::save(&w, dir.path().join("model.safetensors")).expect("save");
    assert_eq!(logits(&crate::ours::load(dir.path(), None)), want);
    let cfg_path = dir.path().join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cfg_path).expect("read")).expect("json");
    cfg["num_hidden_layers"] = 1.into();
    std::fs::write(&cfg_path, cfg.to_string()).expect("write");
    assert_refused(dir.path(), "is past config.json num_hidden_layers 1");
}

/// config.json's `eos_token_id` / `bos_token_id` past `vocab_size` are refused at load, as in
/// a GGUF file: an EOS the model cannot produce never stopped generation (it was accepted).
#[test]
fn hf_special_ids_past_the_vocabulary_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = Spec::of(Arch::Llama);
    tiny::write_folder(dir.path(), &spec, 9);
    let cfg_path = dir.path().join("config.json");
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cfg_path).expect("read")).expect("json");
    let vocab = cfg["vocab_size"].as_u64().expect("vocab_size");
    for (key, value, want) in [
        (
            "eos_token_id",
            serde_json::json!(vocab),
            format!("eos_token_id {vocab} is past the vocabulary of {vocab} tokens"),
        ),
        (
            "eos_token_id",
            serde_json::json!([1, vocab + 5]),
            format!("eos_token_id {} is past", vocab + 5),
        ),
        (
            "bos_token_id",
            serde_json::json!(vocab + 1),
            format!("bos_token_id {} is past", vocab + 1),
        ),
    ] {
        let mut c = cfg.clone();
        c[key] = value;
        std::fs::write(&cfg_path, c.to_string()).expect("write");
        assert_refused(dir.path(), &want);
    }
    let mut c = cfg.clone();
    c["eos_token_id"] = serde_json::json!(vocab - 1);
    std::fs::write(&cfg_path, c.to_string()).expect("write");
    crate::ours::load(dir.path(), None);
}
