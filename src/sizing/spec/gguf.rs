//! [`KvSpec::from_gguf_metadata`]: a model's KV layout from GGUF metadata (llama.cpp key
//! names), without loading weights.
use super::{check_gqa, group, note_unknown_state, to_usize, KvSpec, LayerKind, Mixer, MAX_LAYERS};
use anyhow::{anyhow, bail, Result};
use candle_core::quantized::gguf_file;
use std::collections::HashMap;

/// A GGUF metadata integer (any unsigned or non-negative signed type), or `None`.
pub(crate) fn gguf_uint(v: &gguf_file::Value) -> Option<u64> {
    use gguf_file::Value as V;
    match *v {
        V::U8(x) => Some(x.into()),
        V::U16(x) => Some(x.into()),
        V::U32(x) => Some(x.into()),
        V::U64(x) => Some(x),
        V::I8(x) => u64::try_from(x).ok(),
        V::I16(x) => u64::try_from(x).ok(),
        V::I32(x) => u64::try_from(x).ok(),
        V::I64(x) => u64::try_from(x).ok(),
        _ => None,
    }
}

/// GGUF metadata of one architecture: `{arch}.{key}` lookups with errors naming the key.
struct Gguf<'a> {
    md: &'a HashMap<String, gguf_file::Value>,
    arch: &'a str,
}

impl Gguf<'_> {
    fn key(&self, key: &str) -> String {
        format!("{}.{key}", self.arch)
    }

    /// An integer key, `None` when absent. Errors: present but not an integer.
    fn uint(&self, key: &str) -> Result<Option<u64>> {
        let name = self.key(key);
        match self.md.get(&name) {
            None => Ok(None),
            Some(v) => match gguf_uint(v) {
                Some(n) => Ok(Some(n)),
                None => bail!("{name} is {v:?}, expected a non-negative integer"),
            },
        }
    }

    /// An integer key that may also be a per-layer array (llama.cpp allows both for head
    /// counts): one value per layer. Errors: wrong type or wrong array length.
    fn per_layer(&self, key: &str, layers: usize) -> Result<Option<Vec<u64>>> {
        let name = self.key(key);
        match self.md.get(&name) {
            None => Ok(None),
            Some(gguf_file::Value::Array(items)) => {
                if items.len() != layers {
                    bail!(
                        "{name} has {} entries but block_count is {layers}",
                        items.len()
                    );
                }
                items
                    .iter()
                    .map(|v| {
                        gguf_uint(v).ok_or_else(|| anyhow!("{name} holds {v:?}, expected integers"))
                    })
                    .collect::<Result<Vec<u64>>>()
                    .map(Some)
            }
            Some(_) => Ok(self.uint(key)?.map(|n| vec![n; layers])),
        }
    }
}

impl KvSpec {
    /// Read a model's KV layout from GGUF metadata (`model::gguf::header::read_header` of a
    /// .gguf file; no weights are loaded).
    ///
    /// Keys (llama.cpp names, `{arch}` = `general.architecture`): `{arch}.block_count`,
    /// `{arch}.attention.head_count`, `{arch}.attention.head_count_kv` (absent means
    /// head_count; a per-layer array where 0 marks a recurrent layer),
    /// `{arch}.embedding_length`, `{arch}.attention.key_length` (absent means
    /// embedding_length / head_count), `{arch}.context_length`; MLA:
    /// `{arch}.attention.kv_lora_rank` with `{arch}.rope.dimension_count`; windows:
    /// `{arch}.attention.sliding_window`, applied the way llama.cpp does for gemma2
    /// (alternating), gemma3 (5 local : 1 global, or the pattern key), gpt-oss (alternating
    /// from layer 0, or the pattern key), gemma3n (4 : 1) and cohere2 (3 : 1) only;
    /// llama4's chunked attention (8,192 tokens, 3 chunked : 1 global); KV sharing:
    /// `{arch}.attention.shared_kv_layers` (gemma3n: layers from 20 on when absent, as
    /// llama.cpp fixes it).
    ///
    /// Errors: a missing architecture, block count or head count, or a key of the wrong type.
    pub fn from_gguf_metadata(md: &HashMap<String, gguf_file::Value>) -> Result<KvSpec> {
        let arch = match md.get("general.architecture") {
            Some(gguf_file::Value::String(s)) => s.as_str(),
            Some(v) => bail!("general.architecture is {v:?}, expected a string"),
            None => bail!("no general.architecture in the GGUF metadata"),
        };
        let g = Gguf { md, arch };
        let layers = g.uint("block_count")?.filter(|n| *n > 0).ok_or_else(|| {
            anyhow!(
                "no {} (or it is 0): cannot tell how many layers hold a KV cache",
                g.key("block_count")
            )
        })?;
        if layers > MAX_LAYERS {
            bail!(
                "{} is {layers}, more than {MAX_LAYERS} layers is not a real model",
                g.key("block_count")
            );
        }
        let n = layers as usize;
        let heads = g.per_layer("attention.head_count", n)?;
        let kv_heads = g.per_layer("attention.head_count_kv", n)?;
        let hidden = g.uint("embedding_length")?;
        let mut notes = Vec::new();

        let mla = match g.uint("attention.kv_lora_rank")? {
            // llama.cpp's deepseek2 is always MLA.
            None if arch == "deepseek2" => bail!(
                "no {}: a deepseek2 file caches an MLA latent of that width",
                g.key("attention.kv_lora_rank")
            ),
            None => None,
            Some(rank) => {
                let rope = g.uint("rope.dimension_count")?.ok_or_else(|| {
                    anyhow!(
                        "MLA model ({}) has no {}",
                        g.key("attention.kv_lora_rank"),
                        g.key("rope.dimension_count")
                    )
                })?;
                super::check_mla(
                    &g.key("attention.kv_lora_rank"),
                    rank,
                    &g.key("rope.dimension_count"),
                    rope,
                )?;
                Some(LayerKind::Mla {
                    kv_lora_rank: to_usize("kv_lora_rank", rank)?,
                    qk_rope_head_dim: to_usize("rope.dimension_count", rope)?,
                })
            }
        };
        let window = match (arch, g.uint("attention.sliding_window")?) {
            // llama.cpp (models/llama4.cpp): chunked attention of 8,192 tokens unless the
            // key is 0; the key's other values are not used.
            ("llama4", Some(0)) => None,
            ("llama4", _) => Some(8192),
            // The runtime refuses a gpt-oss file without a positive window, as llama.cpp
            // requires the key.
            ("gpt-oss", None | Some(0)) => bail!(
                "{} is missing or 0: a gpt-oss file needs its sliding window",
                g.key("attention.sliding_window")
            ),
            (_, w) => w.filter(|w| *w > 0),
        };
        // gemma3's `attention.sliding_window_pattern`, as llama.cpp and the runtime read it:
        // one bool per layer, or a period n (layer i slides iff i mod n < n − 1; all if 0).
        let pattern_key = g.key("attention.sliding_window_pattern");
        // The architectures whose sliding layers llama.cpp reads from the pattern key
        // (`load_swa_pattern`): gemma3 (default period 6) and gpt-oss (default 2).
        let patterned = matches!(arch, "gemma3" | "gpt-oss");
        let swa_pattern: Option<Vec<bool>> = match md.get(&pattern_key) {
            Some(gguf_file::Value::Array(items)) if patterned => Some(
                items
                    .iter()
                    .map(|v| match v {
                        gguf_file::Value::Bool(b) => Ok(*b),
                        _ => bail!("{pattern_key} holds {v:?}, expected bools"),
                    })
                    .collect::<Result<_>>()?,
            ),
            Some(_) if patterned => g
                .uint("attention.sliding_window_pattern")?
                .map(|n| (0..layers).map(|i| n == 0 || i % n < n - 1).collect()),
            _ => None,
        };
        if let Some(p) = &swa_pattern {
            if p.len() != layers as usize {
                bail!(
                    "{pattern_key} has {} entries but block_count is {layers}",
                    p.len()
                );
            }
        }
        let local = |i: u64| -> bool {
            match (window, arch) {
                (Some(_), "gemma2") => i.is_multiple_of(2),
                (Some(_), "gemma3") => match &swa_pattern {
                    Some(p) => p[i as usize],
                    None => !(i + 1).is_multiple_of(6),
                },
                (Some(_), "gpt-oss") => match &swa_pattern {
                    Some(p) => p[i as usize],
                    None => i.is_multiple_of(2),
                },
                (Some(_), "gemma3n") => !(i + 1).is_multiple_of(5),
                (Some(_), "cohere2" | "llama4") => !(i + 1).is_multiple_of(4),
                _ => false,
            }
        };
        if arch == "llama4" && window.is_some() {
            notes.push(
                "chunked attention: llama.cpp runs llama4 with chunks of 8,192 tokens on 3 of every 4 layers, which hold at most one chunk (shown as a window of 8,192)".into(),
            );
        }
        // Layers from here on reuse an earlier layer's KV (Gemma-3n): `attention.shared_kv_layers`,
        // else llama.cpp's fixed 20 for gemma3n (models/gemma3n.cpp `n_layer_kv_from_start`).
        let kv_layers = match (g.uint("attention.shared_kv_layers")?, arch) {
            (Some(shared), _) if shared < layers => layers - shared,
            (Some(shared), _) => bail!(
                "{} is {shared} but {} is {layers}: some layer must hold the cache they share",
                g.key("attention.shared_kv_layers"),
                g.key("block_count")
            ),
            (None, "gemma3n") => layers.min(20),
            (None, _) => layers,
        };
        let windowed = matches!(
            arch,
            "gemma2" | "gemma3" | "gemma3n" | "cohere2" | "llama4" | "gpt-oss"
        );
        if let (Some(w), false) = (window, windowed) {
            notes.push(format!(
                "{} {w} ignored: llama.cpp applies it only to gemma2, gemma3, cohere2 and gpt-oss",
                g.key("attention.sliding_window")
            ));
        }

        let mut kinds = Vec::with_capacity(n);
        for i in 0..n {
            let h = heads.as_ref().map(|v| v[i]);
            let kv = kv_heads.as_ref().map(|v| v[i]).or(h);
            if i as u64 >= kv_layers {
                kinds.push(LayerKind::NoKv {
                    mixer: Mixer::SharedKv,
                    state_values: Some(0),
                });
                continue;
            }
            if kv == Some(0) {
                // llama.cpp marks recurrent (Mamba) layers of hybrids with head_count_kv 0.
                kinds.push(LayerKind::NoKv {
                    mixer: Mixer::Mamba,
                    state_values: None,
                });
                continue;
            }
            if let Some(mla) = &mla {
                kinds.push(mla.clone());
                continue;
            }
            let kv = kv.ok_or_else(|| {
                anyhow!(
                    "no {}: cannot tell how many K/V heads a layer has",
                    g.key("attention.head_count")
                )
            })?;
            if let Some(h) = h {
                check_gqa(
                    &g.key("attention.head_count_kv"),
                    kv,
                    &g.key("attention.head_count"),
                    h,
                )?;
            }
            let head_dim = gguf_head_dim(&g, hidden, h)?;
            let (num_key_value_heads, head_dim) = (
                to_usize("head_count_kv", kv)?,
                to_usize("key_length", head_dim)?,
            );
            kinds.push(match window {
                Some(w) if local(i as u64) => LayerKind::SlidingWindow {
                    num_key_value_heads,
                    head_dim,
                    window: w,
                },
                _ => LayerKind::FullAttention {
                    num_key_value_heads,
                    head_dim,
                },
            });
        }
        // Every layer marked recurrent by head_count_kv 0, in a file with no recurrent
        // (ssm) keys and not an RWKV: a corrupt or unfinished header, not a Mamba model.
        let recurrent = g.uint("ssm.conv_kernel")?.is_some()
            || g.uint("ssm.state_size")?.is_some()
            || arch.starts_with("rwkv");
        if !recurrent
            && kinds.iter().all(|k| {
                matches!(
                    k,
                    LayerKind::NoKv {
                        mixer: Mixer::Mamba,
                        ..
                    }
                )
            })
        {
            bail!(
                "{} is 0 on every layer and the file has no {} keys: no layer would hold a KV cache or a recurrent state",
                g.key("attention.head_count_kv"),
                g.key("ssm.*")
            );
        }
        note_unknown_state(&kinds, &mut notes);
        Ok(KvSpec {
            groups: group(kinds),
            hidden_size: hidden,
            // The DeepSeek-V2 paper's MHA baseline: heads × v_head_dim, as for config.json.
            mha_head_dim: match mla {
                Some(_) => g
                    .uint("attention.value_length_mla")?
                    .or(g.uint("attention.value_length")?),
                None => None,
            },
            num_attention_heads: heads.as_ref().and_then(|v| v.iter().copied().max()),
            max_position_embeddings: g.uint("context_length")?,
            model_type: Some(arch.to_string()),
            notes,
        })
    }
}

/// head_dim of a GGUF model: `attention.key_length`, else embedding_length / head_count.
/// Errors: K and V of different widths (not a plain cache), or nothing to compute it from.
fn gguf_head_dim(g: &Gguf, hidden: Option<u64>, heads: Option<u64>) -> Result<u64> {
    let key = g.uint("attention.key_length")?;
    let value = g.uint("attention.value_length")?;
    if let (Some(k), Some(v)) = (key, value) {
        if k != v {
            bail!(
                "{} {k} differs from {} {v}: K and V of different widths are not supported",
                g.key("attention.key_length"),
                g.key("attention.value_length")
            );
        }
    }
    match (key, hidden, heads) {
        (Some(k), _, _) if k > 0 => Ok(k),
        (_, Some(h), Some(n)) if n > 0 && h % n == 0 && h > 0 => Ok(h / n),
        _ => bail!(
            "no {} and no {} divisible by {}: cannot tell head_dim",
            g.key("attention.key_length"),
            g.key("embedding_length"),
            g.key("attention.head_count")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sizing::spec::LayerGroup;

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
    fn gguf_per_layer_kv_heads_mark_recurrent_layers() {
        use gguf_file::Value as G;
        let md: HashMap<String, G> = [
            ("general.architecture", G::String("granitehybrid".into())),
            ("granitehybrid.block_count", G::U32(4)),
            ("granitehybrid.attention.head_count", G::U32(8)),
            (
                "granitehybrid.attention.head_count_kv",
                G::Array(vec![G::U32(0), G::U32(2), G::U32(0), G::U32(0)]),
            ),
            ("granitehybrid.embedding_length", G::U32(512)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let s = KvSpec::from_gguf_metadata(&md).unwrap();
        assert_eq!(s.groups[0].layers, 3);
        assert!(matches!(s.groups[0].kind, LayerKind::NoKv { .. }));
        assert_eq!(s.groups[1], full(2, 64, 1));
        assert!(KvSpec::from_gguf_metadata(&HashMap::new()).is_err());
    }

    fn md(arch: &str, keys: &[(&str, u32)]) -> HashMap<String, gguf_file::Value> {
        let mut md: HashMap<String, gguf_file::Value> = keys
            .iter()
            .map(|(k, v)| (format!("{arch}.{k}"), gguf_file::Value::U32(*v)))
            .collect();
        md.insert(
            "general.architecture".into(),
            gguf_file::Value::String(arch.into()),
        );
        md
    }

    /// A corrupt header: K/V heads that do not divide the heads, or 0 K/V heads on every
    /// layer of a model with no recurrent (ssm) keys, is refused; a Mamba file is not.
    #[test]
    fn bad_kv_head_counts_are_refused() {
        let base = [
            ("block_count", 2),
            ("attention.head_count", 9),
            ("embedding_length", 576),
        ];
        let with = |kv: u32, extra: &[(&'static str, u32)]| {
            let mut keys = base.to_vec();
            keys.push(("attention.head_count_kv", kv));
            keys.extend_from_slice(extra);
            md("llama", &keys)
        };
        let err = |m| format!("{:#}", KvSpec::from_gguf_metadata(&m).unwrap_err());
        assert!(err(with(2, &[])).contains("not a multiple"));
        assert!(err(with(0, &[])).contains("0 on every layer"));
        assert!(KvSpec::from_gguf_metadata(&with(3, &[])).is_ok());
        assert!(KvSpec::from_gguf_metadata(&with(0, &[("ssm.conv_kernel", 4)])).is_ok());
    }

    /// The issue-14 figures (see tests/kv_size.rs) from GGUF metadata, as llama.cpp lays
    /// these architectures out: gemma-3n-E4B at 32k and Llama-4-Scout at 128k, bf16.
    #[test]
    fn gemma3n_and_llama4_as_llama_cpp_lays_them_out() {
        use crate::kv::shape::KvDtype;
        let gemma = md(
            "gemma3n",
            &[
                ("block_count", 35),
                ("attention.head_count", 8),
                ("attention.head_count_kv", 2),
                ("attention.key_length", 256),
                ("attention.value_length", 256),
                ("embedding_length", 2048),
                ("attention.sliding_window", 512),
            ],
        );
        let s = KvSpec::from_gguf_metadata(&gemma).unwrap();
        assert_eq!(s.bytes(32_768, 1, KvDtype::Bf16), Some(285_212_672));
        let llama4 = md(
            "llama4",
            &[
                ("block_count", 48),
                ("attention.head_count", 40),
                ("attention.head_count_kv", 8),
                ("attention.key_length", 128),
                ("embedding_length", 5120),
            ],
        );
        let s = KvSpec::from_gguf_metadata(&llama4).unwrap();
        assert_eq!(s.bytes(131_072, 1, KvDtype::Bf16), Some(7_650_410_496));
        assert_eq!(s.bytes(4_096, 1, KvDtype::Bf16), Some(805_306_368));
    }
}
