//! The memory lines of `--show-stats`: the weights held (and, for a mixture of experts,
//! the weights one token reads and the experts touched), and the KV cache's bytes, blocks,
//! groups, utilisation and rotation.
use crate::model::decoder::weights_held::WeightsHeld;
use crate::units::{group_digits, human_bytes};

/// The `weights held` line: the total, then each form that holds some, e.g.
/// `634,478,592 bytes (605.09 MiB): kernel blocks 91.97 MiB, f32 prefill copy 513.00 MiB, …`.
pub(super) fn weights_line(w: &WeightsHeld) -> String {
    let parts: Vec<String> = [
        ("kernel blocks", w.quantized_blocks),
        ("f32 prefill copy", w.f32_prefill_copy),
        ("candle's matrices", w.candle_matrices),
        ("f32 embedding", w.embedding_f32),
        ("norms and biases", w.vectors),
    ]
    .iter()
    .filter(|(_, b)| *b > 0)
    .map(|(name, b)| format!("{name} {}", crate::units::binary_size(*b)))
    .collect();
    format!("{}: {}", human_bytes(w.total()), parts.join(", "))
}

/// The KV-cache lines of `--show-stats`: bytes measured next to kv-size's estimate, blocks,
/// and the utilisation of the paged cache against a contiguous reservation.
pub(super) fn kv_lines(kv: &crate::engine::stats::KvStats) -> Vec<(&'static str, String)> {
    use crate::units::count_of as plural;
    let mut lines = vec![
        (
            "KV cache",
            format!(
                "{}, {} measured ({})",
                plural(kv.tokens, "token"),
                human_bytes(kv.bytes_used),
                kv.dtype
            ),
        ),
        ("KV cache estimate", human_bytes(kv.bytes_estimated)),
        (
            "KV blocks",
            format!(
                "{} of {}, last {}/{} full: {} held (estimate {})",
                plural(kv.blocks, "block"),
                plural(kv.block_size, "token"),
                kv.last_block_tokens,
                kv.block_size,
                human_bytes(kv.bytes_held),
                human_bytes(kv.bytes_estimated_paged)
            ),
        ),
        ("KV pool allocated", human_bytes(kv.bytes_allocated)),
        (
            "KV groups",
            match kv.sliding_layers {
                0 => "one group: every layer holds every block".to_string(),
                n => format!(
                    "full attention {} held; sliding window {} ({n} layers) {} held; a full cache (--swa-full) would hold {}",
                    human_bytes(kv.bytes_held_full),
                    group_digits(kv.sliding_window as u64),
                    human_bytes(kv.bytes_held_sliding),
                    human_bytes(kv.bytes_full_cache)
                ),
            },
        ),
        (
            "KV utilisation",
            format!(
                "paged {:.1}%; a contiguous reservation of prompt + max_new_tokens ({} tokens, {}) would be {:.1}% used, of the full context ({} tokens) {:.1}%",
                kv.paged_utilisation_pct(),
                group_digits(kv.reserved_tokens as u64),
                human_bytes(kv.reserved_bytes),
                kv.reserved_utilisation_pct(),
                group_digits(kv.context_tokens as u64),
                kv.context_utilisation_pct()
            ),
        ),
    ];
    // Only a run that evicted (--kv-evict) has a line: what its full-attention layers hold.
    if kv.tokens_evicted > 0 {
        lines.insert(
            1,
            (
                "KV evicted",
                format!(
                    "{} of {} evicted: each full-attention layer and KV head holds {}",
                    group_digits(kv.tokens_evicted as u64),
                    plural(kv.tokens, "token"),
                    plural(kv.tokens - kv.tokens_evicted, "row")
                ),
            ),
        );
    }
    // Only a rotated dtype (q4_0r, iq4_nlr) has a line: what it rotated.
    if let Some(r) = &kv.rotation {
        lines.push(("KV rotation", describe_rotation(r)));
    }
    lines
}

/// The MLA line: the latent's bytes per token beside what an MHA cache (2 · heads ·
/// v_head_dim values per layer, the DeepSeek-V2 paper's comparison) and a GQA-8 cache of the
/// same model would hold, in the same dtype, e.g. `576 values per layer: 31,104 bytes per
/// token; MHA 221,184 (7.1×), GQA-8 110,592 (3.6×)`. None without MLA.
pub(super) fn mla_line(
    c: &crate::model::ModelConfig,
    kv: &crate::engine::stats::KvStats,
) -> Option<String> {
    let m = c.mla?;
    let dtype = crate::kv::KvDtype::parse(kv.dtype)?;
    let layers = c.num_hidden_layers as u64;
    let row = |values: usize| dtype.bytes_for(values as u64).unwrap_or(u64::MAX);
    let latent = layers * row(m.latent_width());
    let heads = |h: usize| layers * 2 * h as u64 * row(m.v_head_dim);
    let mha = heads(c.num_attention_heads);
    let times = |b: u64| b as f64 / latent.max(1) as f64;
    // GQA-8 only where it is fewer heads than MHA.
    let gqa = match c.num_attention_heads > 8 {
        true => format!(
            ", GQA-8 {} ({:.1}×)",
            group_digits(heads(8)),
            times(heads(8))
        ),
        false => String::new(),
    };
    Some(format!(
        "{} + {} values per layer ({}): {} bytes per token; an MHA cache ({} heads × {} × 2) would hold {} ({:.1}×){gqa}",
        m.kv_lora_rank,
        m.qk_rope_head_dim,
        kv.dtype,
        group_digits(latent),
        c.num_attention_heads,
        m.v_head_dim,
        group_digits(mha),
        times(mha),
    ))
}

/// The mixture-of-experts lines: the active weights beside the held, and the distinct
/// experts each layer ran per prefill pass and per decode step.
pub(super) fn moe_lines(
    m: &crate::engine::stats::MoeStats,
    layers: usize,
) -> Vec<(&'static str, String)> {
    let (e, k) = (m.num_experts, m.experts_per_tok);
    vec![
        (
            "weights active",
            format!(
                "{} per token (attention, router and {k} of {e} experts per layer, LM head)",
                human_bytes(m.active_weight_bytes_per_token)
            ),
        ),
        (
            "experts touched",
            format!(
                "per layer: prefill {:.1} of {e} per pass ({}), decode {:.1} of {e} per step ({}); {k} per token, {layers} layers",
                m.prefill_experts_touched,
                match m.prefill_passes {
                    1 => "1 pass".to_string(),
                    n => format!("{n} passes"),
                },
                m.decode_experts_touched,
                crate::units::count_of(m.decode_steps as usize, "step"),
            ),
        ),
    ]
}

/// "K and V of every layer (30 of 30), each head's 64 values as one Hadamard group of 64".
fn describe_rotation(r: &crate::engine::stats::KvRotation) -> String {
    let groups = match r.groups.as_slice() {
        [g] => format!("as one Hadamard group of {g}"),
        gs => format!(
            "in Hadamard groups of {}",
            gs.iter()
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(" + ")
        ),
    };
    let n = r.layers.len();
    format!(
        "K and V of every layer ({n} of {n}), each head's {} values {groups}",
        r.head_dim
    )
}
