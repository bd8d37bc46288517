//! The notes printed under a `kv-size` report: what the reader assumed, token counts past the
//! trained context, tensor-parallel caveats and rows that do not fit in `--gpu-mem`.
use super::fit::GpuFit;
use super::parse::SeqArg;
use super::resolve::Model;
use crate::sizing::estimate::{Estimate, Layout};
use crate::sizing::spec::LayerKind;
use crate::units::binary_size;
use crate::units::group_digits;

pub(super) fn notes(model: &Model, seqs: &[SeqArg], layout: &Layout, gpu: bool) -> Vec<String> {
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

/// Notes on what `--gpu-mem` found: rows that do not fit, and token counts past the model's
/// trained context.
pub(super) fn fit_notes(
    g: &GpuFit,
    seqs: &[SeqArg],
    rows: &[Estimate],
    max_pos: Option<u64>,
) -> Vec<String> {
    let mut notes = Vec::new();
    let free = g.fits.first().map_or(0, |f| f.free_bytes);
    for (s, r) in seqs.iter().zip(rows) {
        if r.total_bytes > free {
            notes.push(format!(
                "batch {} × {} tokens needs {} per GPU, more than the {} free: it does not fit",
                group_digits(r.batch),
                group_digits(s.tokens),
                binary_size(r.total_bytes),
                binary_size(free)
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
