//! The `kv-size` report: the text header and tables, or JSON.
use super::fit::GpuFit;
use super::parse::SeqArg;
use super::resolve::Model;
use super::sizes::{bytes_per_value, size};
use crate::kv::KvDtype;
use crate::sizing::estimate::Estimate;
use crate::sizing::spec::LayerKind;
use crate::units::binary_size;
use crate::units::group_digits;
use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use serde_json::json;

fn seq_cell(s: &SeqArg) -> String {
    let digits = group_digits(s.tokens);
    if s.input.replace(['_', ','], "") == s.tokens.to_string() {
        digits
    } else {
        format!("{digits} ({})", s.input)
    }
}

pub(super) fn new_table(header: Vec<&str>, right_from: usize) -> Table {
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

/// Everything one `kv-size` run prints.
pub(super) struct Report<'a> {
    pub(super) model: &'a Model,
    pub(super) seqs: &'a [SeqArg],
    pub(super) rows: &'a [Estimate],
    pub(super) dtype: KvDtype,
    pub(super) dtype_default: bool,
    /// `--dtype auto` chose `dtype` from the model ([`super::auto_dtype`]).
    pub(super) dtype_auto: bool,
    pub(super) gpu: Option<&'a GpuFit>,
    pub(super) notes: Vec<String>,
}

impl Report<'_> {
    fn dtype_line(&self) -> String {
        let how = if self.dtype_default {
            "default"
        } else {
            "auto"
        };
        let why = match (&self.model.torch_dtype, self.model.gguf) {
            _ if !self.dtype_default && !self.dtype_auto => String::new(),
            (Some(t), _) if super::auto::auto_follows(t).is_some() => format!(
                " ({how}: the model's dtype {t} in config.json, as vLLM's --kv-cache-dtype auto)"
            ),
            (Some(t), _) => format!(
                " ({how}: config.json's dtype {t} is not a float dtype vLLM's auto follows; bf16, as for a bf16 model)"
            ),
            (None, true) => format!(" ({how} for a .gguf: llama.cpp's cache type)"),
            (None, false) => format!(" ({how}: as vLLM's --kv-cache-dtype auto for a bf16 model)"),
        };
        format!(
            "{}, {}{why}",
            self.dtype.name(),
            bytes_per_value(self.dtype)
        )
    }

    /// The "as if MHA" header line: per-token bytes per GPU, how they are computed, and the
    /// ratio to this cache's per-token bytes (both per GPU).
    fn mha_line(&self, mha: u64) -> String {
        let spec = &self.model.spec;
        let tp = self.rows[0].tp;
        let per_gpu = if tp > 1 { " per GPU" } else { "" };
        let head_dim = match spec.attention_head_dim() {
            Some(d) => Some(format!("head_dim {d}")),
            None => spec.mha_head_dim.map(|d| format!("v_head_dim {d}")),
        };
        let width = match (spec.num_attention_heads, head_dim) {
            (Some(h), Some(d)) if tp > 1 => format!("{h}/{tp} heads · {d}"),
            (Some(h), Some(d)) => format!("{h} heads · {d}"),
            _ if tp > 1 => format!(
                "hidden_size {}/{tp}",
                group_digits(spec.hidden_size.unwrap_or(0))
            ),
            _ => format!(
                "hidden_size {}",
                group_digits(spec.hidden_size.unwrap_or(0))
            ),
        };
        let this = self.rows[0].bytes_per_token;
        let ratio = if this > 0 {
            format!(": {:.2}× this cache", mha as f64 / this as f64)
        } else {
            String::new()
        };
        format!(
            "{} bytes per token{per_gpu} (2 · {} layers · {width} · {}){ratio}",
            group_digits(mha),
            spec.num_layers(),
            bytes_per_value(self.dtype)
        )
    }

    pub(super) fn text(&self) -> String {
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
                binary_size(first.bytes_per_token),
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
        if let Some(mha) = spec.as_if_mha_bytes_per_token(self.dtype, first.tp) {
            let mut text = self.mha_line(mha);
            if windowed {
                // Plain MHA has no windows: the ratio holds per token only until they fill
                // (the table's column has the whole figure for each length).
                text += ", per token until the windows fill (no windows in plain MHA)";
            }
            line("as if MHA", text);
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
                    binary_size(g.gpu_mem)
                ),
            );
            line(
                "weights",
                format!(
                    "{} bytes ({}): {}{share}",
                    group_digits(g.weights),
                    binary_size(g.weights),
                    g.weights_from
                ),
            );
            line(
                "free",
                format!(
                    "{} bytes ({}) per GPU for the KV cache",
                    group_digits(free),
                    binary_size(free)
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
        header.push(if tp {
            "as if plain MHA per GPU"
        } else {
            "as if plain MHA"
        });
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
                row.push(binary_size(r.total_bytes_all_gpus));
            }
            row.push(r.as_if_mha_bytes.map_or("-".into(), binary_size));
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

    pub(super) fn json(&self) -> Result<String> {
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
            "as_if_mha_bytes_per_token": spec.as_if_mha_bytes_per_token(self.dtype, self.rows[0].tp),
            "gpu_mem_bytes": self.gpu.map(|g| g.gpu_mem),
            "weights_bytes": self.gpu.map(|g| g.weights),
            "weights_from": self.gpu.map(|g| g.weights_from.clone()),
            "rows": rows,
            "notes": self.notes,
        });
        Ok(format!("{}\n", serde_json::to_string_pretty(&out)?))
    }
}
