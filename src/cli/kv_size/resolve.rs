//! Resolving `--model` (a preset, config.json, HF directory, .gguf file or hub id in the local
//! HF cache) or a custom shape into a [`Model`]: its [`KvSpec`] and where the weights' size
//! comes from.
use super::args::KvSizeArgs;
use crate::model::hf;
use crate::sizing::presets::{self, Preset};
use crate::sizing::spec::{check_gqa, KvSpec};
use crate::units::group_digits;
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where the weights' size comes from, for `--gpu-mem`.
#[derive(Debug, Clone)]
pub(super) enum WeightsHint {
    /// Known bytes (safetensors files, GGUF tensor data).
    Bytes(u64, String),
    /// A parameter count (a preset's model card), times `--weight-dtype`.
    Params(u64, String),
}

/// A resolved `--model` (or custom shape).
#[derive(Debug)]
pub(super) struct Model {
    /// What the user called it (`qwen3-32b`, a path, a hub id, `custom`).
    pub(super) name: String,
    /// Where the numbers came from, for the report.
    pub(super) origin: String,
    pub(super) spec: KvSpec,
    /// Read from GGUF metadata (default dtype f16).
    pub(super) gguf: bool,
    /// config.json's `torch_dtype` (or `dtype`, or its `text_config`'s) as written, e.g.
    /// `bfloat16`: what `--dtype auto` follows.
    pub(super) torch_dtype: Option<String>,
    pub(super) weights: Option<WeightsHint>,
    pub(super) note: Option<String>,
}

pub(super) fn resolve(args: &KvSizeArgs) -> Result<Model> {
    if let Some(name) = &args.model {
        return resolve_model(name);
    }
    if args.layers.is_some()
        || args.kv_heads.is_some()
        || args.head_dim.is_some()
        || args.heads.is_some()
        || args.hidden.is_some()
    {
        return custom(args);
    }
    bail!("no model: give --model NAME (see --list) or a custom shape with --layers, --kv-heads and --head-dim")
}

/// A custom shape from `--layers`, `--kv-heads`, `--head-dim` (or `--heads` with `--hidden`).
fn custom(args: &KvSizeArgs) -> Result<Model> {
    let layers = args
        .layers
        .ok_or_else(|| anyhow!("a custom shape needs --layers"))?;
    let head_dim = match (args.head_dim, args.hidden, args.heads) {
        (Some(d), _, _) => d,
        (None, Some(h), Some(n)) if h % n == 0 => h / n,
        (None, Some(h), Some(n)) => bail!("--hidden {h} is not a multiple of --heads {n}"),
        _ => bail!("a custom shape needs --head-dim, or --heads with --hidden"),
    };
    let kv = args
        .kv_heads
        .or(args.heads)
        .ok_or_else(|| anyhow!("a custom shape needs --kv-heads (or --heads)"))?;
    if let (Some(k), Some(h)) = (args.kv_heads, args.heads) {
        check_gqa("--kv-heads", k, "--heads", h)?;
    }
    let size =
        |flag: &str, n: u64| usize::try_from(n).map_err(|_| anyhow!("{flag} {n} is too large"));
    let mut spec = KvSpec::plain(
        size("--layers", layers)?,
        size("--kv-heads", kv)?,
        size("--head-dim", head_dim)?,
    );
    spec.hidden_size = args.hidden;
    spec.num_attention_heads = args.heads;
    Ok(Model {
        name: "custom".into(),
        origin: "shape from the command line".into(),
        spec,
        gguf: false,
        torch_dtype: None,
        weights: None,
        note: None,
    })
}

fn resolve_model(name: &str) -> Result<Model> {
    let path = Path::new(name);
    if path.exists() {
        return from_path(name, path);
    }
    if name.contains('/') {
        if let Some(config) = hub_cache_config(name) {
            let mut m = from_config_file(&config)?;
            m.name = name.to_string();
            m.origin = format!("local HF cache, {}", config.display());
            return Ok(m);
        }
    }
    if let Some(p) = presets::find(name)? {
        return from_preset(p);
    }
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".json")
        || lower.ends_with(".gguf")
        || name.starts_with('.')
        || name.starts_with('/')
    {
        bail!("{name}: no such file or directory");
    }
    Err(presets::unknown(name))
}

fn from_preset(p: Preset) -> Result<Model> {
    Ok(Model {
        name: p.name.clone(),
        origin: format!("preset, from {}", p.source),
        spec: p.spec()?,
        gguf: false,
        torch_dtype: None,
        weights: p.num_parameters.map(|n| {
            WeightsHint::Params(n, format!("{} parameters (model card)", group_digits(n)))
        }),
        note: p.note,
    })
}

/// A file or directory given as `--model`.
fn from_path(name: &str, path: &Path) -> Result<Model> {
    if path.is_dir() {
        let config = path.join("config.json");
        if config.is_file() {
            return from_config_file(&config).map(|m| Model {
                name: name.into(),
                ..m
            });
        }
        let ggufs = files_with_ext(path, "gguf");
        return match ggufs.as_slice() {
            [one] => from_gguf(one).map(|m| Model {
                name: name.into(),
                ..m
            }),
            [] => bail!("{name}: directory has no config.json and no .gguf file"),
            _ => bail!(
                "{name}: directory has no config.json and {} .gguf files; name one",
                ggufs.len()
            ),
        };
    }
    if is_gguf(path) {
        return from_gguf(path).map(|m| Model {
            name: name.into(),
            ..m
        });
    }
    from_config_file(path).map(|m| Model {
        name: name.into(),
        ..m
    })
}

/// True for a `.gguf` name or a file starting with the GGUF magic.
fn is_gguf(path: &Path) -> bool {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        return true;
    }
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok_and(|_| &magic == b"GGUF")
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case(ext)) && p.is_file())
        .collect();
    files.sort();
    files
}

/// A config.json file; the weights' size is the .safetensors files beside it, if any.
fn from_config_file(path: &Path) -> Result<Model> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).with_context(|| format!("{shown}: cannot read"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow!("{shown}: not valid JSON ({e})"))?;
    let spec = KvSpec::from_config_json(&value).with_context(|| format!("{shown}"))?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let shards = files_with_ext(dir, "safetensors");
    let weights = if shards.is_empty() {
        None
    } else {
        let total = shards
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .fold(0u64, u64::saturating_add);
        Some(WeightsHint::Bytes(
            total,
            format!("{} .safetensors file(s) in {}", shards.len(), dir.display()),
        ))
    };
    Ok(Model {
        name: shown.to_string(),
        origin: format!("config.json at {shown}"),
        spec,
        gguf: false,
        torch_dtype: ["torch_dtype", "dtype"].iter().find_map(|k| {
            value
                .get(*k)
                .or_else(|| value.get("text_config").and_then(|t| t.get(*k)))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        }),
        weights,
        note: None,
    })
}

/// A .gguf file: its metadata only (tensor data is not read); weights = the tensor data size.
fn from_gguf(path: &Path) -> Result<Model> {
    let shown = path.display();
    let mut file = std::fs::File::open(path).with_context(|| format!("{shown}: cannot open"))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    // Our reader, with llama.cpp's header checks (candle's divides by a zero alignment and
    // knows no MXFP4).
    let content = crate::model::gguf::header::read_header(
        &mut std::io::BufReader::new(&mut file),
        len,
        &shown.to_string(),
    )?
    .content;
    let spec = KvSpec::from_gguf_metadata(&content.metadata).with_context(|| format!("{shown}"))?;
    let weights = len
        .checked_sub(content.tensor_data_offset)
        .map(|b| WeightsHint::Bytes(b, format!("tensor data of {shown}")));
    Ok(Model {
        name: shown.to_string(),
        origin: format!("GGUF metadata of {shown}"),
        spec,
        gguf: true,
        torch_dtype: None,
        weights,
        note: None,
    })
}

/// config.json of hub id `id` (`org/name`, revision `main`) if the local HF cache holds it
/// (no network); the cache location is [`hf::cache::hub_cache_dir`].
fn hub_cache_config(id: &str) -> Option<PathBuf> {
    let snapshot = hf::cache::find_snapshot(&hf::cache::hub_cache_dir()?, id, "main")?;
    Some(snapshot.join("config.json"))
}
