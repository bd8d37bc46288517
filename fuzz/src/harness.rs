//! One function per fuzz target: feed bytes to one of nanollm's parsers of what others wrote,
//! the way nanollm reads them (a file on disk where nanollm takes a path). Each returns the
//! parser's verdict; a panic, an abort, a hang or a huge allocation is the bug a fuzzer looks
//! for. Compiled twice: into the cargo-fuzz crate (`fuzz/fuzz_targets/*.rs`) and, by path,
//! into `tests/fuzz_parsers.rs` (proptest), so it uses only what the main crate's tests have.
use anyhow::{anyhow, Context, Result};
use candle_core::Device;
use nanollm::kv::KvDtype;
use nanollm::model::chat::{render_with, ChatOptions, Message};
use nanollm::sizing::estimate::{estimate, Layout, Query};
use nanollm::sizing::spec::KvSpec;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A GGUF file: [`nanollm::model::gguf::GgufFile::open`] (our header checks, then candle's
/// reader), then the model config and kv-size's KV layout from its metadata.
pub fn gguf_header(data: &[u8]) -> Result<()> {
    let dir = Scratch::new()?;
    let path = dir.write("model.gguf", data)?;
    let gguf = nanollm::model::gguf::GgufFile::open(&path)?;
    let spec = KvSpec::from_gguf_metadata(&gguf.content.metadata);
    gguf.config()?;
    spec.map(|_| ())
}

/// A `model.safetensors` file: [`nanollm::model::safetensors::Checkpoint::open`], then every
/// tensor it declares read as f32 (as the loader reads them).
pub fn safetensors_header(data: &[u8]) -> Result<()> {
    let dir = Scratch::new()?;
    dir.write("model.safetensors", data)?;
    let ckpt = nanollm::model::safetensors::Checkpoint::open(dir.path())?;
    let st = candle_core::safetensors::SliceSafetensors::new(data)?;
    for (name, view) in st.tensors() {
        ckpt.f32(&name, view.shape(), &Device::Cpu)?;
    }
    Ok(())
}

/// A config.json: [`nanollm::model::hf::config::parse`].
pub fn hf_config(data: &[u8]) -> Result<()> {
    let value: Value = serde_json::from_slice(data)?;
    nanollm::model::hf::config::parse(&value).map(|_| ())
}

/// A model folder's tokenizer side files: `data` split at NUL bytes into
/// tokenizer_config.json, generation_config.json and chat_template.jinja (a part absent or
/// empty: no such file), read by [`nanollm::model::hf::tokenizer_config::read`].
pub fn tokenizer_config(data: &[u8]) -> Result<()> {
    let dir = Scratch::new()?;
    let names = [
        "tokenizer_config.json",
        "generation_config.json",
        "chat_template.jinja",
    ];
    for (name, part) in names.iter().zip(data.splitn(3, |&b| b == 0)) {
        if !part.is_empty() {
            dir.write(name, part)?;
        }
    }
    nanollm::model::hf::tokenizer_config::read(dir.path()).map(|_| ())
}

/// An OpenAI request body: JSON, then [`nanollm::openai::parse_body`] (as the server does).
pub fn openai_body(data: &[u8]) -> Result<()> {
    let value: Value = serde_json::from_slice(data)?;
    let object = value.as_object().context("not a JSON object")?;
    nanollm::openai::parse_body(object)
        .map(|_| ())
        .map_err(|e| anyhow!("{e}"))
}

/// A `run-batch` input file: [`nanollm::cli::batch_input::parse_jsonl`].
pub fn batch_jsonl(data: &[u8]) -> Result<()> {
    let text = std::str::from_utf8(data)?;
    nanollm::cli::batch_input::parse_jsonl(text, 16).map(|_| ())
}

/// A config.json as `kv-size` reads it: [`KvSpec::from_config_json`], then the estimate for a
/// few sequence lengths, batches and layouts (checked arithmetic on the declared sizes).
pub fn kv_size_config(data: &[u8]) -> Result<()> {
    let value: Value = serde_json::from_slice(data)?;
    let spec = KvSpec::from_config_json(&value)?;
    for (seq, batch, dtype, block_size) in [
        (1, 1, KvDtype::F16, None),
        (4096, 8, KvDtype::Q8_0, Some(16)),
        (1 << 40, 1 << 20, KvDtype::F32, Some(1 << 30)),
    ] {
        let layout = Layout { tp: 1, block_size };
        let q = Query {
            seq,
            batch,
            dtype,
            layout,
        };
        // An estimate that overflows is an error, not a panic.
        let _ = estimate(&spec, &q);
    }
    Ok(())
}

/// A `--kl-divergence-base` file as `perplexity --kl-divergence` reads it:
/// [`nanollm::eval::kld::BaseReader::open`], the length check for 1 to 4 scored positions
/// per chunk, every chunk's rows, then the end.
pub fn kld_base(data: &[u8]) -> Result<()> {
    let dir = Scratch::new()?;
    let path = dir.write("base.kld", data)?;
    let mut reader = nanollm::eval::kld::BaseReader::open(&path)?;
    let scored = (1..=4)
        .find(|&s| reader.check_length(s).is_ok())
        .ok_or_else(|| anyhow!("no scored count fits the file's length"))?;
    for _ in 0..reader.header.chunks {
        reader.next_rows(scored)?;
    }
    reader.expect_end()
}

/// A chat template (lossy UTF-8) rendered by [`render_with`] for a fixed conversation.
pub fn chat_template(data: &[u8]) -> Result<()> {
    let template = String::from_utf8_lossy(data);
    let message = |role: &str, content: &str| Message {
        role: role.to_string(),
        content: content.to_string(),
    };
    let messages = [
        message("system", "You are helpful."),
        message("user", "Hi <|im_end|> {{ there }}"),
        message("assistant", "Hello."),
        message("user", "Bye"),
    ];
    let opts = ChatOptions {
        add_generation_prompt: true,
        bos_token: Some("<s>"),
        eos_token: Some("</s>"),
        enable_thinking: Some(false),
        now_unix: Some(0),
    };
    render_with(&template, &messages, &opts).map(|_| ())
}

/// A fresh directory for one input's files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("nanollm-fuzz-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write(&self, name: &str, data: &[u8]) -> Result<PathBuf> {
        let path = self.0.join(name);
        std::fs::write(&path, data)?;
        Ok(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
