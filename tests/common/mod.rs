//! Shared helpers for the real-model tests: the default model, loaded once per test binary.
#![allow(dead_code)]
use candle_core::quantized::{gguf_file, QTensor};
use candle_core::Device;
use nanollm::model::{source, Loaded};
use std::path::PathBuf;
use std::sync::OnceLock;

pub mod server;
pub mod tiny;

/// Path of the default model; panics with the install command when it is missing, so a
/// machine without it fails loudly instead of skipping.
pub fn model_path() -> PathBuf {
    let path = source::default_model_path();
    assert!(
        path.is_file(),
        "default model missing at {}: run scripts/install-model.sh",
        path.display()
    );
    path
}

/// The default model loaded as `generate` loads it (dense prefill), once.
pub fn model() -> &'static Loaded {
    static MODEL: OnceLock<Loaded> = OnceLock::new();
    MODEL.get_or_init(|| match source::load(&model_path(), &Device::Cpu, true) {
        Ok(m) => m,
        Err(e) => panic!("cannot load the default model: {e:#}"),
    })
}

/// The default model with quantized matrices only (no dense prefill copy), once.
pub fn quantized_model() -> &'static Loaded {
    static MODEL: OnceLock<Loaded> = OnceLock::new();
    MODEL.get_or_init(|| match source::load(&model_path(), &Device::Cpu, false) {
        Ok(m) => m,
        Err(e) => panic!("cannot load the default model: {e:#}"),
    })
}

/// The `nanollm` binary, without RUST_BACKTRACE (errors must stay one line either way).
pub fn nanollm() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("nanollm").expect("binary");
    cmd.env_remove("RUST_BACKTRACE");
    cmd
}

/// Run and expect failure with exactly one `error:` line on stderr containing `needle`, no
/// panic.
pub fn fails_with(args: &[&str], needle: &str) {
    let out = nanollm().args(args).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "{args:?} stderr not one line: {stderr}"
    );
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: expected {needle:?} in {stderr}"
    );
}

/// Run `nanollm args`, expect success (else show its stderr), return stdout.
pub fn run_ok(args: &[&str]) -> Vec<u8> {
    let out = nanollm().args(args).output().expect("run");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The generated token ids of `nanollm generate --json <args>`.
pub fn generate_ids(args: &[&str]) -> Vec<u64> {
    let mut all = vec!["generate", "--json"];
    all.extend_from_slice(args);
    let doc: serde_json::Value = serde_json::from_slice(&run_ok(&all)).expect("json");
    doc["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t["id"].as_u64().expect("id"))
        .collect()
}

/// `ours`'s last-position logits for a fixed prompt next to candle-transformers'
/// `quantized_llama` loaded from the same GGUF: (max |Δlogit|, cosine similarity, whether
/// the top-1 tokens agree), our KV cache stored as `kv_dtype`. The oracle of the quantized
/// kernels.
pub fn quantized_logits_vs_candle(
    ours: &Loaded,
    kv_dtype: nanollm::kv::KvDtype,
) -> (f32, f32, bool) {
    use candle_core::Tensor;
    use candle_transformers::models::quantized_llama::ModelWeights;
    use nanollm::kv::KvCache;
    use nanollm::model::decoder::logits_vec;
    let mut file = std::fs::File::open(model_path()).expect("open model");
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).expect("read gguf");
    let mut reference =
        ModelWeights::from_gguf(content, &mut file, &Device::Cpu).expect("load reference");
    let prompt = ours
        .tokenizer
        .encode("The capital of France is Paris. The capital of Germany is")
        .expect("encode");
    let mut cache = KvCache::new(ours.config().kv_shape(kv_dtype), 16, 4096).expect("kv cache");
    let l = logits_vec(
        &ours
            .decoder
            .forward(&prompt, 0, &mut cache)
            .expect("forward"),
    )
    .expect("vec");
    let input = Tensor::new(prompt.as_slice(), &Device::Cpu)
        .and_then(|t| t.unsqueeze(0))
        .expect("input");
    let r = logits_vec(
        &reference
            .forward(&input, 0)
            .and_then(|t| t.squeeze(0))
            .expect("ref"),
    )
    .expect("vec");
    let d = l
        .iter()
        .zip(&r)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    let dot: f32 = l.iter().zip(&r).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
    };
    (d, dot / (norm(&l) * norm(&r)), argmax(&l) == argmax(&r))
}

/// Path of the real Gemma 3 270M (Q4_K_M GGUF); panics with the install command when it is
/// missing, so a machine without it fails loudly instead of skipping.
pub fn gemma3_path() -> PathBuf {
    let path = source::cache_dir().join("gemma-3-270m-q4_k_m.gguf");
    assert!(
        path.is_file(),
        "Gemma 3 270M missing at {}: run scripts/install-gemma3.sh",
        path.display()
    );
    path
}

/// The real Gemma 3 270M loaded as `generate` loads it (dense prefill copy), once.
pub fn gemma3() -> &'static Loaded {
    static MODEL: OnceLock<Loaded> = OnceLock::new();
    MODEL.get_or_init(|| match source::load(&gemma3_path(), &Device::Cpu, true) {
        Ok(m) => m,
        Err(e) => panic!("cannot load Gemma 3 270M: {e:#}"),
    })
}

/// A greedy KV-cache request of `text` for `n` tokens (EOS ignored) under `cache`.
pub fn greedy_request(
    m: &Loaded,
    text: &str,
    n: usize,
    cache: nanollm::engine::CacheConfig,
) -> nanollm::engine::Request {
    nanollm::engine::Request {
        prompt_ids: m.tokenizer.encode(text).expect("encode"),
        max_new_tokens: n,
        sampling: nanollm::engine::SamplingParams::greedy(),
        mode: nanollm::engine::DecodeMode::KvCache,
        cache,
        stop_token_ids: Vec::new(),
        stop_strings: Vec::new(),
        ignore_eos: true,
        speculative: Default::default(),
    }
}

/// The tokens `req` generates alone (the single-sequence engine).
pub fn alone(m: &Loaded, req: &nanollm::engine::Request) -> Vec<u32> {
    let stop = std::sync::atomic::AtomicBool::new(false);
    nanollm::engine::generate(&m.decoder, &m.tokenizer, req, &stop, |_| Ok(()))
        .expect("generate")
        .tokens
}

/// The default model's tensors, each through `edit`, plus `extra`, written to `out`.
pub fn rewrite(
    out: &std::path::Path,
    edit: impl Fn(&str, QTensor) -> QTensor,
    extra: Vec<(String, QTensor)>,
) {
    let mut file = std::fs::File::open(model_path()).expect("open model");
    let content = gguf_file::Content::read(&mut file).expect("read gguf");
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(String, QTensor)> = names
        .iter()
        .map(|name| {
            let t = content
                .tensor(&mut file, name, &Device::Cpu)
                .expect("tensor");
            (name.to_string(), edit(name, t))
        })
        .collect();
    tensors.extend(extra);
    let metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut w = std::io::BufWriter::new(std::fs::File::create(out).expect("create"));
    gguf_file::write(&mut w, &metadata, &tensors).expect("write gguf");
}
