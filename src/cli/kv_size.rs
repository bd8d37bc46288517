//! `nanollm kv-size`: KV-cache memory for a model at a context length, exact to the byte.
//!
//! Reads only a model's config (a preset, config.json, HF directory, GGUF metadata or a hub
//! id in the local HF cache), never its weights. The arithmetic is [`crate::kv::estimate`].
use crate::cli::output::write_stdout;
use crate::kv::estimate::{estimate, fit, free_per_gpu, Estimate, Fit, Layout, Query};
use crate::kv::presets::{self, Preset};
use crate::kv::spec::{group_digits, KvSpec, LayerKind, Mixer};
use crate::kv::KvDtype;
use crate::model::hf;
use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file;
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const AFTER_HELP: &str = "\
Examples:
  nanollm kv-size --model qwen3-32b --seq 128k
  nanollm kv-size --model llama-3.1-70b --seq 8k,32k,128k --batch 16 --tp 4 --gpu-mem 80GiB
  nanollm kv-size --model ./Qwen3-0.6B/config.json --seq 32k --dtype fp8 --json
  nanollm kv-size --model model.gguf --seq 4096 --dtype f32
  nanollm kv-size --layers 32 --kv-heads 8 --head-dim 128 --seq 1m
  nanollm kv-size --list

Units: bytes are exact; GiB = 2^30 bytes, GB = 10^9 bytes. In --seq and --batch, k and K
both mean 1,024 and m and M 1,048,576 (context lengths are named that way: \"128k\" is
131,072 tokens); the resolved count is always printed.

Arithmetic, per token and layer: MHA/GQA/MQA 2 · num_key_value_heads · head_dim values;
MLA kv_lora_rank + qk_rope_head_dim values; a sliding-window layer holds min(T, window)
tokens; linear-attention and Mamba layers hold no KV, only a constant state per sequence.
--dtype defaults to bf16 (what vLLM's --kv-cache-dtype auto gives for a bf16 model), and to
f16 for a .gguf (llama.cpp's default cache type); nanollm generate caches f32 on the CPU.";

/// Arguments of `nanollm kv-size`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct KvSizeArgs {
    /// A built-in preset (see --list; case-insensitive), a config.json, an HF model directory,
    /// a .gguf file, or a hub id (org/name) found in the local HF cache.
    #[arg(long, short)]
    pub model: Option<String>,

    /// Tokens per sequence: 4096, 32k, 128K, 1m (k = 1,024, m = 1,048,576), or a list
    /// 4k,32k,128k (one row each). Default: the model's max_position_embeddings.
    #[arg(long, allow_hyphen_values = true)]
    pub seq: Option<String>,

    /// Concurrent sequences (each of --seq tokens).
    #[arg(long, default_value = "1", allow_hyphen_values = true)]
    pub batch: String,

    /// KV-cache dtype: f32, f16, bf16, fp8, int8, q8_0 (34 bytes per 32 values), q4_0 (18
    /// bytes per 32). Default: bf16, or f16 for a .gguf.
    #[arg(long)]
    pub dtype: Option<String>,

    /// Tensor-parallel degree: bytes are per GPU; KV heads are split across GPUs, replicated
    /// when --tp exceeds num_key_value_heads; an MLA latent is replicated on every GPU.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub tp: u64,

    /// Paged allocation: each sequence rounds up to whole blocks of this many tokens (vLLM's
    /// default is 16).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub block_size: Option<u64>,

    /// Memory of one GPU, e.g. 80GiB or 141GB: with the weights' size, how many sequences of
    /// --seq fit and the most tokens one sequence can reach. No allowance for activations.
    #[arg(long)]
    pub gpu_mem: Option<String>,

    /// The weights' total size for --gpu-mem, e.g. 16GiB (default: the .safetensors files of
    /// an HF directory, a .gguf's tensor data, or a preset's parameter count × --weight-dtype).
    #[arg(long)]
    pub weights: Option<String>,

    /// Parameter count for the weights' size, e.g. 8B, 70.6B, 135M (K/M/B/T = 10^3/6/9/12).
    #[arg(long, conflicts_with = "weights")]
    pub params: Option<String>,

    /// Bytes per parameter for --params and presets: f32, f16, bf16, fp8, int8, q8_0, q4_0.
    #[arg(long, default_value = "bf16")]
    pub weight_dtype: String,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// List the built-in presets and exit.
    #[arg(long)]
    pub list: bool,

    /// Custom shape: number of layers (num_hidden_layers).
    #[arg(long, conflicts_with = "model", value_parser = clap::value_parser!(u64).range(1..))]
    pub layers: Option<u64>,

    /// Custom shape: K/V heads per layer (num_key_value_heads; default --heads).
    #[arg(long, conflicts_with = "model", value_parser = clap::value_parser!(u64).range(1..))]
    pub kv_heads: Option<u64>,

    /// Custom shape: values per head (head_dim; default --hidden / --heads).
    #[arg(long, conflicts_with = "model", value_parser = clap::value_parser!(u64).range(1..))]
    pub head_dim: Option<u64>,

    /// Custom shape: attention heads (num_attention_heads).
    #[arg(long, conflicts_with = "model", value_parser = clap::value_parser!(u64).range(1..))]
    pub heads: Option<u64>,

    /// Custom shape: model width (hidden_size), for head_dim and the "as if plain MHA" figure.
    #[arg(long, conflicts_with = "model", value_parser = clap::value_parser!(u64).range(1..))]
    pub hidden: Option<u64>,
}

/// Run `nanollm kv-size`.
///
/// Errors: bad input (one line naming the flag or file and what is wrong), an unknown model
/// (with the closest preset names), an overflowing size, or a closed stdout.
pub fn run(args: KvSizeArgs) -> Result<ExitCode> {
    if args.list {
        let out = if args.json {
            list_json()?
        } else {
            list_table()?
        };
        write_stdout(&out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let model = resolve(&args)?;
    let seqs = match &args.seq {
        Some(s) => parse_seq_list(s)?,
        None => {
            let max = model.spec.max_position_embeddings.ok_or_else(|| {
                anyhow!("--seq is needed: the model does not give max_position_embeddings")
            })?;
            vec![SeqArg {
                input: "max_position_embeddings".into(),
                tokens: max,
            }]
        }
    };
    let batch = parse_count("--batch", &args.batch)?;
    let (dtype, dtype_default) = match &args.dtype {
        Some(d) => (parse_dtype("--dtype", d)?, false),
        None if model.gguf => (KvDtype::F16, true),
        None => (KvDtype::Bf16, true),
    };
    let layout = Layout {
        tp: args.tp,
        block_size: args.block_size,
    };
    let mut rows = Vec::with_capacity(seqs.len());
    for s in &seqs {
        let q = Query {
            seq: s.tokens,
            batch,
            dtype,
            layout,
        };
        rows.push(estimate(&model.spec, &q)?);
    }
    let gpu = match &args.gpu_mem {
        Some(mem) => Some(gpu_fit(&args, &model, mem, &seqs, dtype, layout)?),
        None => None,
    };
    let mut notes = notes(&model, &seqs, &layout, gpu.is_some());
    if let Some(g) = &gpu {
        notes.extend(fit_notes(
            g,
            &seqs,
            &rows,
            model.spec.max_position_embeddings,
        ));
    }
    let report = Report {
        model: &model,
        seqs: &seqs,
        rows: &rows,
        dtype,
        dtype_default,
        gpu: gpu.as_ref(),
        notes,
    };
    let out = if args.json {
        report.json()?
    } else {
        report.text()
    };
    write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------- parsing numbers

/// One `--seq` value: what was typed and the token count it means.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SeqArg {
    input: String,
    tokens: u64,
}

/// Split `digits[.digits]` into (mantissa, fraction digits); `None` if not that form.
fn decimal(s: &str) -> Option<(u128, u32)> {
    let s = s.replace('_', "");
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    if frac.len() > 18 || int.len() > 30 {
        return Some((u128::MAX, 0)); // too long to be anything but an overflow
    }
    let mantissa: u128 = format!("{int}{frac}").parse().ok()?;
    Some((mantissa, frac.len() as u32))
}

/// `mantissa / 10^frac · unit` as an exact u64. Errors: overflow, or a fraction that does not
/// come out whole when `whole` is set (token counts); otherwise it rounds down (bytes).
fn scale(
    flag: &str,
    s: &str,
    (mantissa, frac): (u128, u32),
    unit: u128,
    whole: bool,
) -> Result<u64> {
    let num = mantissa.checked_mul(unit);
    let den = 10u128.pow(frac);
    let value = num.map(|n| (n / den, n % den));
    match value {
        Some((v, rem)) if v <= u64::MAX as u128 => {
            if whole && rem != 0 {
                bail!("{flag} '{s}': not a whole number");
            }
            Ok(v as u64)
        }
        _ => bail!(
            "{flag} '{s}': too large, more than 2^64 − 1 = {}",
            group_digits(u64::MAX)
        ),
    }
}

/// A count: `4096`, `32k`, `128K`, `1m`, `1.5k` (k/K = 1,024, m/M = 1,048,576, `_` allowed
/// between digits). Errors: empty, negative, zero, a leading zero, garbage, or overflow.
fn parse_count(flag: &str, s: &str) -> Result<u64> {
    let t = s.trim();
    if t.is_empty() {
        bail!("{flag} is empty: expected a count like 4096, 32k or 1m");
    }
    if t.starts_with('-') {
        bail!("{flag} '{s}': must be at least 1, not negative");
    }
    let (num, unit) = match t.as_bytes()[t.len() - 1] {
        b'k' | b'K' => (&t[..t.len() - 1], 1u128 << 10),
        b'm' | b'M' => (&t[..t.len() - 1], 1u128 << 20),
        _ => (t, 1),
    };
    let parts = decimal(num).ok_or_else(|| {
        anyhow!("{flag} '{s}': not a count (expected e.g. 4096, 32k, 128K or 1m)")
    })?;
    if num.len() > 1 && num.starts_with('0') && !num.starts_with("0.") {
        bail!("{flag} '{s}': leading zero (commas separate values: write 131072, not 131,072)");
    }
    let n = scale(flag, s, parts, unit, true)?;
    if n == 0 {
        bail!("{flag} '{s}': must be at least 1");
    }
    Ok(n)
}

/// A comma-separated list of `--seq` counts.
fn parse_seq_list(s: &str) -> Result<Vec<SeqArg>> {
    s.split(',')
        .map(|item| {
            let item = item.trim();
            Ok(SeqArg {
                input: item.to_string(),
                tokens: parse_count("--seq", item)?,
            })
        })
        .collect()
}

/// A memory size: `80GiB`, `141GB`, `1.5TiB`, `512MiB`, or plain bytes. Units are
/// case-insensitive: B, KiB, MiB, GiB, TiB (2^10..2^40) and KB, MB, GB, TB (10^3..10^12).
/// Errors: a bare K/M/G/T (ambiguous), an unknown unit, garbage, or overflow.
fn parse_bytes(flag: &str, s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    let unit_value: u128 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "k" | "m" | "g" | "t" => bail!(
            "{flag} '{s}': '{unit}' is ambiguous: write {u}iB (2^{p}) or {u}B (10^{d})",
            u = unit.to_ascii_uppercase(),
            p = 10 * (1 + "kmgt".find(&unit.to_ascii_lowercase()).unwrap_or(0)),
            d = 3 * (1 + "kmgt".find(&unit.to_ascii_lowercase()).unwrap_or(0)),
        ),
        _ => bail!(
            "{flag} '{s}': unknown unit '{unit}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)"
        ),
    };
    if num.starts_with('-') {
        bail!("{flag} '{s}': a size cannot be negative");
    }
    let parts = decimal(num)
        .ok_or_else(|| anyhow!("{flag} '{s}': not a size (expected e.g. 80GiB or 141GB)"))?;
    scale(flag, s, parts, unit_value, false)
}

/// A parameter count: `8B`, `70.6B`, `135M`, `7000000000` (K/M/B/T = 10^3/10^6/10^9/10^12).
fn parse_params(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, unit) = match t.as_bytes().last().map(u8::to_ascii_lowercase) {
        Some(b'k') => (&t[..t.len() - 1], 1_000u128),
        Some(b'm') => (&t[..t.len() - 1], 1_000_000),
        Some(b'b') => (&t[..t.len() - 1], 1_000_000_000),
        Some(b't') => (&t[..t.len() - 1], 1_000_000_000_000),
        _ => (t, 1),
    };
    let parts = decimal(num)
        .ok_or_else(|| anyhow!("--params '{s}': not a count (expected e.g. 8B, 70.6B or 135M)"))?;
    match scale("--params", s, parts, unit, false)? {
        0 => bail!("--params '{s}': must be at least 1"),
        n => Ok(n),
    }
}

fn parse_dtype(flag: &str, s: &str) -> Result<KvDtype> {
    KvDtype::parse(s).ok_or_else(|| {
        anyhow!("{flag} '{s}': unknown dtype (expected f32, f16, bf16, fp8, int8, q8_0 or q4_0)")
    })
}

// ---------------------------------------------------------------- resolving --model

/// Where the weights' size comes from, for `--gpu-mem`.
#[derive(Debug, Clone)]
enum WeightsHint {
    /// Known bytes (safetensors files, GGUF tensor data).
    Bytes(u64, String),
    /// A parameter count (a preset's model card), times `--weight-dtype`.
    Params(u64, String),
}

/// A resolved `--model` (or custom shape).
#[derive(Debug)]
struct Model {
    /// What the user called it (`qwen3-32b`, a path, a hub id, `custom`).
    name: String,
    /// Where the numbers came from, for the report.
    origin: String,
    spec: KvSpec,
    /// Read from GGUF metadata (default dtype f16).
    gguf: bool,
    weights: Option<WeightsHint>,
    note: Option<String>,
}

fn resolve(args: &KvSizeArgs) -> Result<Model> {
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
        weights,
        note: None,
    })
}

/// A .gguf file: its metadata only (tensor data is not read); weights = the tensor data size.
fn from_gguf(path: &Path) -> Result<Model> {
    let shown = path.display();
    let mut file = std::fs::File::open(path).with_context(|| format!("{shown}: cannot open"))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let content =
        gguf_file::Content::read(&mut std::io::BufReader::new(&mut file)).map_err(|e| {
            anyhow!(
                "{shown}: not a readable GGUF file ({})",
                without_backtrace(&e)
            )
        })?;
    let spec = KvSpec::from_gguf_metadata(&content.metadata).with_context(|| format!("{shown}"))?;
    let weights = len
        .checked_sub(content.tensor_data_offset)
        .map(|b| WeightsHint::Bytes(b, format!("tensor data of {shown}")));
    Ok(Model {
        name: shown.to_string(),
        origin: format!("GGUF metadata of {shown}"),
        spec,
        gguf: true,
        weights,
        note: None,
    })
}

/// A candle error's message without the backtrace candle attaches when `RUST_BACKTRACE` is set.
fn without_backtrace(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => without_backtrace(inner),
        other => other.to_string(),
    }
}

/// config.json of hub id `id` (`org/name`, revision `main`) if the local HF cache holds it
/// (no network); the cache location is [`hf::cache::hub_cache_dir`].
fn hub_cache_config(id: &str) -> Option<PathBuf> {
    let snapshot = hf::cache::find_snapshot(&hf::cache::hub_cache_dir()?, id, "main")?;
    Some(snapshot.join("config.json"))
}

// ---------------------------------------------------------------- --gpu-mem

/// The answer to `--gpu-mem`: the weights' size and a [`Fit`] per `--seq`.
#[derive(Debug)]
struct GpuFit {
    gpu_mem: u64,
    weights: u64,
    weights_from: String,
    fits: Vec<Fit>,
}

fn gpu_fit(
    args: &KvSizeArgs,
    model: &Model,
    mem: &str,
    seqs: &[SeqArg],
    dtype: KvDtype,
    layout: Layout,
) -> Result<GpuFit> {
    let gpu_mem = parse_bytes("--gpu-mem", mem)?;
    let wdt = parse_dtype("--weight-dtype", &args.weight_dtype)?;
    let by_params = |n: u64, from: &str| -> Result<(u64, String)> {
        let b = wdt
            .bytes_for(n)
            .ok_or_else(|| anyhow!("weights of {n} parameters overflow 64 bits"))?;
        Ok((
            b,
            format!("{from} × {} ({})", wdt.name(), bytes_per_value(wdt)),
        ))
    };
    let (weights, weights_from) = if let Some(w) = &args.weights {
        (parse_bytes("--weights", w)?, format!("--weights {w}"))
    } else if let Some(p) = &args.params {
        by_params(parse_params(p)?, &format!("--params {p}"))?
    } else {
        match &model.weights {
            Some(WeightsHint::Bytes(b, from)) => (*b, from.clone()),
            Some(WeightsHint::Params(n, from)) => by_params(*n, from)?,
            None => bail!("--gpu-mem needs the weights' size: pass --weights (e.g. 16GiB) or --params (e.g. 8B)"),
        }
    };
    let free =
        free_per_gpu(gpu_mem, weights, layout.tp).with_context(|| format!("--gpu-mem {mem}"))?;
    let fits = seqs
        .iter()
        .map(|s| {
            fit(
                &model.spec,
                &Query {
                    seq: s.tokens,
                    batch: 1,
                    dtype,
                    layout,
                },
                free,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(GpuFit {
        gpu_mem,
        weights,
        weights_from,
        fits,
    })
}

/// Notes on what `--gpu-mem` found: rows that do not fit, and token counts past the model's
/// trained context.
fn fit_notes(g: &GpuFit, seqs: &[SeqArg], rows: &[Estimate], max_pos: Option<u64>) -> Vec<String> {
    let mut notes = Vec::new();
    let free = g.fits.first().map_or(0, |f| f.free_bytes);
    for (s, r) in seqs.iter().zip(rows) {
        if r.total_bytes > free {
            notes.push(format!(
                "batch {} × {} tokens needs {} per GPU, more than the {} free: it does not fit",
                group_digits(r.batch),
                group_digits(s.tokens),
                binary(r.total_bytes),
                binary(free)
            ));
        }
    }
    if let Some(max) = max_pos {
        if g.fits.iter().any(|f| f.max_tokens.is_none_or(|t| t > max)) {
            notes.push(format!(
                "max tokens is what the memory allows; the model was trained for max_position_embeddings {}",
                group_digits(max)
            ));
        }
    }
    notes
}

fn bytes_per_value(d: KvDtype) -> String {
    match d.block() {
        (1, 1) => "1 byte per value".into(),
        (b, 1) => format!("{b} bytes per value"),
        (b, n) => format!("{b} bytes per {n} values"),
    }
}

// ---------------------------------------------------------------- notes

fn notes(model: &Model, seqs: &[SeqArg], layout: &Layout, gpu: bool) -> Vec<String> {
    let mut notes = model.spec.notes.clone();
    notes.extend(model.note.clone());
    if let Some(max) = model.spec.max_position_embeddings {
        for s in seqs.iter().filter(|s| s.tokens > max) {
            notes.push(format!(
                "{} tokens is beyond max_position_embeddings {} in the config (rope scaling such as YaRN may extend it)",
                group_digits(s.tokens),
                group_digits(max)
            ));
        }
    }
    if layout.tp > 1 {
        if model
            .spec
            .groups
            .iter()
            .any(|g| matches!(g.kind, LayerKind::Mla { .. }))
        {
            notes.push(
                "MLA: the latent cache is not split by heads, so every GPU holds all of it".into(),
            );
        }
        let replicated = model.spec.groups.iter().any(|g| match g.kind {
            LayerKind::FullAttention {
                num_key_value_heads: kv,
                ..
            }
            | LayerKind::SlidingWindow {
                num_key_value_heads: kv,
                ..
            } => (kv as u64) < layout.tp,
            _ => false,
        });
        if replicated {
            notes.push(format!(
                "--tp {} exceeds num_key_value_heads: each GPU holds one replicated KV head",
                layout.tp
            ));
        }
    }
    if gpu {
        notes.push("--gpu-mem: no allowance for activations, CUDA graphs or fragmentation (vLLM uses 90% of the GPU by default)".into());
    }
    notes
}

// ---------------------------------------------------------------- rendering

/// Binary human size: `32.00 GiB`, `90.00 MiB`, `512 B`.
fn binary(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2} {}", UNITS[i])
}

/// Decimal human size: `34.36 GB`, `94.37 MB`, `512 B`.
fn decimal_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["kB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1000.0;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < UNITS.len() {
        v /= 1000.0;
        i += 1;
    }
    format!("{v:.2} {}", UNITS[i])
}

fn size(bytes: u64) -> String {
    format!("{} ({})", binary(bytes), decimal_size(bytes))
}

fn seq_cell(s: &SeqArg) -> String {
    let digits = group_digits(s.tokens);
    if s.input.replace(['_', ','], "") == s.tokens.to_string() {
        digits
    } else {
        format!("{digits} ({})", s.input)
    }
}

/// Short label for `--list`: `64× full 8×128`.
fn short(kind: &LayerKind) -> String {
    match kind {
        LayerKind::FullAttention {
            num_key_value_heads,
            head_dim,
        } => format!("full {num_key_value_heads}×{head_dim}"),
        LayerKind::SlidingWindow {
            num_key_value_heads,
            head_dim,
            window,
        } => {
            format!(
                "window {} {num_key_value_heads}×{head_dim}",
                group_digits(*window)
            )
        }
        LayerKind::Mla {
            kv_lora_rank,
            qk_rope_head_dim,
        } => format!("MLA {kv_lora_rank}+{qk_rope_head_dim}"),
        LayerKind::NoKv {
            mixer: Mixer::LinearAttention,
            ..
        } => "linear (no KV)".into(),
        LayerKind::NoKv {
            mixer: Mixer::Mamba,
            ..
        } => "mamba (no KV)".into(),
    }
}

fn new_table(header: Vec<&str>, right_from: usize) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .apply_modifier(comfy_table::modifiers::UTF8_ROUND_CORNERS)
        .set_header(header);
    for i in right_from..t.column_count() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

fn list_table() -> Result<String> {
    let mut t = new_table(
        vec![
            "preset",
            "layers",
            "KV bytes/token (bf16)",
            "max context",
            "parameters",
            "source",
        ],
        2,
    );
    if let Some(c) = t.column_mut(5) {
        c.set_cell_alignment(CellAlignment::Left);
    }
    for p in presets::all()? {
        let spec = p.spec()?;
        let layers = spec
            .groups
            .iter()
            .map(|g| format!("{}× {}", g.layers, short(&g.kind)))
            .collect::<Vec<_>>()
            .join(" + ");
        t.add_row(vec![
            p.name.clone(),
            layers,
            spec.bytes_per_token(KvDtype::Bf16, 1)
                .map_or("overflow".into(), group_digits),
            spec.max_position_embeddings
                .map_or("-".into(), group_digits),
            p.num_parameters.map_or("-".into(), group_digits),
            p.source.clone(),
        ]);
    }
    Ok(format!("{t}\n"))
}

fn list_json() -> Result<String> {
    let mut out = Vec::new();
    for p in presets::all()? {
        let spec = p.spec()?;
        out.push(json!({
            "name": p.name,
            "source": p.source,
            "num_parameters": p.num_parameters,
            "num_hidden_layers": spec.num_layers(),
            "groups": spec.groups,
            "bytes_per_token_bf16": spec.bytes_per_token(KvDtype::Bf16, 1),
            "max_position_embeddings": spec.max_position_embeddings,
        }));
    }
    Ok(format!("{}\n", serde_json::to_string_pretty(&out)?))
}

/// Everything one `kv-size` run prints.
struct Report<'a> {
    model: &'a Model,
    seqs: &'a [SeqArg],
    rows: &'a [Estimate],
    dtype: KvDtype,
    dtype_default: bool,
    gpu: Option<&'a GpuFit>,
    notes: Vec<String>,
}

impl Report<'_> {
    fn dtype_line(&self) -> String {
        let why = match (self.dtype_default, self.model.gguf) {
            (false, _) => String::new(),
            (true, true) => " (default for a .gguf: llama.cpp's cache type)".into(),
            (true, false) => " (default: vLLM's --kv-cache-dtype auto for a bf16 model)".into(),
        };
        format!(
            "{}, {}{why}",
            self.dtype.name(),
            bytes_per_value(self.dtype)
        )
    }

    fn text(&self) -> String {
        let spec = &self.model.spec;
        let first = &self.rows[0];
        let mut s = format!("{} — {}\n", self.model.name, self.model.origin);
        let mut line = |label: &str, text: String| s += &format!("  {label:<11} {text}\n");
        let groups: Vec<String> = spec
            .groups
            .iter()
            .map(|g| format!("{} × {}", g.layers, g.kind.label()))
            .collect();
        line(
            "layers",
            format!("{}: {}", spec.num_layers(), groups.join(", ")),
        );
        line("KV dtype", self.dtype_line());
        let windowed = spec
            .groups
            .iter()
            .any(|g| matches!(g.kind, LayerKind::SlidingWindow { .. }));
        line(
            "per token",
            format!(
                "{} bytes ({}) per sequence{}{}",
                group_digits(first.bytes_per_token),
                binary(first.bytes_per_token),
                if first.tp > 1 {
                    format!(" per GPU (tp {})", first.tp)
                } else {
                    String::new()
                },
                if windowed {
                    ", until the windows fill"
                } else {
                    ""
                }
            ),
        );
        if let Some(mha) = spec.as_if_mha_bytes_per_token(self.dtype) {
            let width = match spec.hidden_size {
                Some(h) => format!("hidden_size {}", group_digits(h)),
                None => "num_attention_heads · head_dim".into(),
            };
            let one_gpu = spec.bytes_per_token(self.dtype, 1).unwrap_or(0);
            let ratio = if one_gpu > 0 {
                format!(": {:.2}× this cache", mha as f64 / one_gpu as f64)
            } else {
                String::new()
            };
            line(
                "as if MHA",
                format!(
                    "{} bytes per token (2 · {} layers · {width} · {}){ratio}",
                    group_digits(mha),
                    spec.num_layers(),
                    bytes_per_value(self.dtype)
                ),
            );
        }
        if let Some(b) = first.block_size {
            line(
                "paged",
                format!("blocks of {b} tokens; each sequence rounds up to whole blocks"),
            );
        }
        if let Some(g) = self.gpu {
            let share = if first.tp > 1 {
                format!("; 1/{} per GPU", first.tp)
            } else {
                String::new()
            };
            let free = g.fits.first().map_or(0, |f| f.free_bytes);
            line(
                "GPU memory",
                format!(
                    "{} bytes ({}) per GPU",
                    group_digits(g.gpu_mem),
                    binary(g.gpu_mem)
                ),
            );
            line(
                "weights",
                format!(
                    "{} bytes ({}): {}{share}",
                    group_digits(g.weights),
                    binary(g.weights),
                    g.weights_from
                ),
            );
            line(
                "free",
                format!(
                    "{} bytes ({}) per GPU for the KV cache",
                    group_digits(free),
                    binary(free)
                ),
            );
        }
        s += "\n";
        s += &format!("{}\n", self.main_table());
        if spec.groups.len() > 1 || self.rows.iter().any(|r| r.state_bytes > 0) {
            s += &format!("\nBy layer kind:\n{}\n", self.kind_table());
        }
        for n in &self.notes {
            s += &format!("note: {n}\n");
        }
        s
    }

    fn main_table(&self) -> Table {
        let tp = self.rows[0].tp > 1;
        let state = self.rows.iter().any(|r| r.state_bytes > 0);
        let mut header = vec!["seq (tokens)", "batch"];
        header.push(if tp {
            "KV bytes per GPU"
        } else {
            "KV cache bytes"
        });
        if state {
            header.extend(["state bytes", "total bytes"]);
        }
        header.push(if tp { "size per GPU" } else { "size" });
        if tp {
            header.push("all GPUs");
        }
        header.push("as if plain MHA");
        if self.gpu.is_some() {
            header.extend(["sequences that fit", "max tokens (1 sequence)"]);
        }
        let mut t = new_table(header, 0);
        for (i, (s, r)) in self.seqs.iter().zip(self.rows).enumerate() {
            let mut row = vec![seq_cell(s), group_digits(r.batch), group_digits(r.kv_bytes)];
            if state {
                row.extend([group_digits(r.state_bytes), group_digits(r.total_bytes)]);
            }
            row.push(size(r.total_bytes));
            if tp {
                row.push(binary(r.total_bytes_all_gpus));
            }
            row.push(r.as_if_mha_bytes.map_or("-".into(), binary));
            if let Some(g) = self.gpu {
                let f = &g.fits[i];
                row.push(f.sequences.map_or("unbounded".into(), group_digits));
                row.push(f.max_tokens.map_or("unbounded".into(), group_digits));
            }
            t.add_row(row);
        }
        t
    }

    fn kind_table(&self) -> Table {
        let mut t = new_table(
            vec![
                "seq (tokens)",
                "layers",
                "kind",
                "tokens held",
                "bytes/token",
                "KV bytes",
                "state bytes",
            ],
            3,
        );
        if let Some(c) = t.column_mut(1) {
            c.set_cell_alignment(CellAlignment::Right);
        }
        for (s, r) in self.seqs.iter().zip(self.rows) {
            for g in &r.groups {
                t.add_row(vec![
                    seq_cell(s),
                    g.layers.to_string(),
                    g.label.clone(),
                    group_digits(g.tokens_held),
                    group_digits(g.bytes_per_token),
                    group_digits(g.kv_bytes),
                    group_digits(g.state_bytes),
                ]);
            }
        }
        t
    }

    fn json(&self) -> Result<String> {
        let spec = &self.model.spec;
        let rows: Vec<serde_json::Value> = self
            .seqs
            .iter()
            .zip(self.rows)
            .enumerate()
            .map(|(i, (s, r))| {
                let mut v = serde_json::to_value(r)?;
                v["seq_input"] = json!(s.input);
                v["fit"] = match self.gpu {
                    Some(g) => serde_json::to_value(g.fits[i])?,
                    None => serde_json::Value::Null,
                };
                Ok(v)
            })
            .collect::<Result<_>>()?;
        let out = json!({
            "model": {
                "name": self.model.name,
                "origin": self.model.origin,
                "model_type": spec.model_type,
                "num_hidden_layers": spec.num_layers(),
                "hidden_size": spec.hidden_size,
                "num_attention_heads": spec.num_attention_heads,
                "max_position_embeddings": spec.max_position_embeddings,
                "groups": spec.groups,
            },
            "dtype": self.dtype.name(),
            "dtype_is_default": self.dtype_default,
            "batch": self.rows[0].batch,
            "tp": self.rows[0].tp,
            "block_size": self.rows[0].block_size,
            "bytes_per_token": self.rows[0].bytes_per_token,
            "as_if_mha_bytes_per_token": spec.as_if_mha_bytes_per_token(self.dtype),
            "gpu_mem_bytes": self.gpu.map(|g| g.gpu_mem),
            "weights_bytes": self.gpu.map(|g| g.weights),
            "weights_from": self.gpu.map(|g| g.weights_from.clone()),
            "rows": rows,
            "notes": self.notes,
        });
        Ok(format!("{}\n", serde_json::to_string_pretty(&out)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_use_1024_for_k() {
        assert_eq!(parse_count("--seq", "128k").unwrap(), 131_072);
        assert_eq!(parse_count("--seq", "128K").unwrap(), 131_072);
        assert_eq!(parse_count("--seq", "1m").unwrap(), 1_048_576);
        assert_eq!(parse_count("--seq", "4096").unwrap(), 4096);
        assert_eq!(parse_count("--seq", "1.5k").unwrap(), 1536);
        assert_eq!(parse_count("--seq", "131_072").unwrap(), 131_072);
        for bad in [
            "12q",
            "-5",
            "0",
            "",
            "k",
            "1.3k",
            "072",
            "99999999999999999999",
            "18014398509481984k",
        ] {
            assert!(parse_count("--seq", bad).is_err(), "{bad}");
        }
        assert_eq!(parse_seq_list("4k, 32k,128k").unwrap().len(), 3);
        assert!(parse_seq_list("131,072").is_err());
    }

    #[test]
    fn sizes_need_explicit_units() {
        assert_eq!(parse_bytes("--gpu-mem", "80GiB").unwrap(), 80 << 30);
        assert_eq!(parse_bytes("--gpu-mem", "141GB").unwrap(), 141_000_000_000);
        assert_eq!(parse_bytes("--gpu-mem", "1.5 GiB").unwrap(), 3 << 29);
        assert_eq!(parse_bytes("--gpu-mem", "1024").unwrap(), 1024);
        assert!(parse_bytes("--gpu-mem", "80G")
            .unwrap_err()
            .to_string()
            .contains("GiB"));
        assert!(parse_bytes("--gpu-mem", "80 parsecs").is_err());
        assert!(parse_bytes("--gpu-mem", "-1GiB").is_err());
        assert_eq!(parse_params("70.6B").unwrap(), 70_600_000_000);
        assert_eq!(parse_params("135M").unwrap(), 135_000_000);
    }

    #[test]
    fn human_sizes() {
        assert_eq!(binary(34_359_738_368), "32.00 GiB");
        assert_eq!(decimal_size(34_359_738_368), "34.36 GB");
        assert_eq!(binary(512), "512 B");
    }
}
