//! `kv-size --list`: the built-in presets as a table or JSON.
use super::render::new_table;
use crate::kv::KvDtype;
use crate::sizing::presets;
use crate::sizing::spec::{LayerKind, Mixer};
use crate::units::group_digits;
use anyhow::Result;
use comfy_table::CellAlignment;
use serde_json::json;

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
        LayerKind::NoKv {
            mixer: Mixer::SharedKv,
            ..
        } => "shared (no KV)".into(),
        LayerKind::NoKv {
            mixer: Mixer::MlpOnly,
            ..
        } => "MLP only (no KV)".into(),
    }
}

pub(super) fn list_table() -> Result<String> {
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

pub(super) fn list_json() -> Result<String> {
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
