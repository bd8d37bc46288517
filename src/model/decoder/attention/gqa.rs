//! Grouped-query attention (Ainslie et al. 2023) with RoPE (Su et al. 2021) and a causal
//! mask: Q, K, V projections (optionally biased, Qwen2), RMSNorm on each Q and K head when
//! the architecture has it (Qwen3, Gemma 3), a sliding window on the layers that have one
//! (Mistral, Gemma 3, gpt-oss), scores scaled by `query_pre_attn_scalar^−½` or
//! `head_dim^−½`, and a sink logit per head in the softmax where the model has them (gpt-oss).
use crate::kv::{KvPart, KvPool};
use crate::model::batch::SeqChunk;
use crate::model::decoder::pass::LayerPass;
use crate::model::linear::{project_mask, Linear};
use crate::model::paged_attention::{self, AttnSeq};
use candle_core::Result;
use rayon::prelude::*;

/// A GQA block's weights (names as in HF Llama).
#[derive(Debug, Clone)]
pub struct Gqa {
    /// `[num_attention_heads · head_dim, hidden_size]`.
    pub q_proj: Linear,
    /// `[num_key_value_heads · head_dim, hidden_size]`.
    pub k_proj: Linear,
    /// `[num_key_value_heads · head_dim, hidden_size]`.
    pub v_proj: Linear,
    /// `[hidden_size, num_attention_heads · head_dim]`.
    pub o_proj: Linear,
    /// Per-head RMSNorm weight on Q, `[head_dim]` (Qwen3, Gemma 3).
    pub q_norm: Option<Vec<f32>>,
    /// Per-head RMSNorm weight on K, `[head_dim]` (Qwen3, Gemma 3).
    pub k_norm: Option<Vec<f32>>,
    /// A sink logit per query head, `[num_attention_heads]` (gpt-oss `attn_sinks`).
    pub sinks: Option<Vec<f32>>,
}

impl Gqa {
    /// Causal self-attention of one layer for the rows of every sequence.
    /// `x`: `[Σ n, hidden_size]` → `[Σ n, hidden_size]`.
    pub fn forward(
        &self,
        pass: &LayerPass,
        x: &[f32],
        pool: &mut KvPool,
        seqs: &[SeqChunk],
    ) -> Result<Vec<f32>> {
        let (c, index, rope, dense) = (pass.config, pass.index, pass.rope, pass.dense);
        let d = c.head_dim;
        let (heads, kv_heads) = (c.num_attention_heads, c.num_key_value_heads);
        let eps = c.rms_norm_eps as f32;
        let qkv = project_mask(&[&self.q_proj, &self.k_proj, &self.v_proj], x, dense)?;
        let [q, k, v] = &qkv[..] else {
            candle_core::bail!("missing projection");
        };
        let scale = c.attention_scale();
        let layer_window = c.layer_windows.get(index).copied().flatten();
        // This layer's group and its slot in the group's blocks (the layer itself with one
        // group). A sliding layer whose group keeps every block (`--swa-full`) scores every
        // key and masks those before the window, as llama.cpp's full cache does: the same
        // bits, the time of a full scan.
        let (group, slot) = pool.groups().slot(index);
        let window = paged_attention::Window {
            size: layer_window,
            scan_masked: layer_window.is_some() && pool.groups().groups[group].window.is_none(),
        };
        let q_norm = self.q_norm.as_deref().map(|w| (w, eps));
        let k_norm = self.k_norm.as_deref().map(|w| (w, eps));
        let (qw, kw) = (heads * d, kv_heads * d);
        // Per sequence: [n, heads·d] → [heads, n, d], rotated at its positions (q scaled by
        // 1/√d); K and V written into its slots.
        let starts: Vec<usize> = seqs
            .iter()
            .scan(0, |at, s| {
                let start = *at;
                *at += s.len();
                Some(start)
            })
            .collect();
        let rotate = |(s, &at): (&SeqChunk, &usize)| {
            let (n, p) = (s.len(), s.start_pos);
            let q = &q[at * qw..(at + n) * qw];
            let k = &k[at * kw..(at + n) * kw];
            let v = &v[at * kw..(at + n) * kw];
            (
                rope.heads_major(q, n, heads, p, true, scale, q_norm),
                rope.heads_major(k, n, kv_heads, p, true, 1.0, k_norm),
                rope.heads_major(v, n, kv_heads, p, false, 1.0, None),
            )
        };
        // Many sequences (batched decode): rotate them on both threads.
        let rotated: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = if seqs.len() >= 4 {
            seqs.par_iter().zip(starts.par_iter()).map(rotate).collect()
        } else {
            seqs.iter().zip(starts.iter()).map(rotate).collect()
        };
        let mut qs = Vec::with_capacity(seqs.len());
        // Rotated at their positions, written at their rows: past an eviction
        // (`kv::evict`) a group holds fewer rows than positions, and a key keeps its phase.
        for (s, (q, k, v)) in seqs.iter().zip(rotated) {
            let (n, row) = (s.len(), s.table.row_of(group, s.start_pos));
            pool.write(s.table.group(group), slot, KvPart::K, row, n, &k);
            pool.write(s.table.group(group), slot, KvPart::V, row, n, &v);
            if let Some(log) = s.observe.filter(|l| l.wants(s.start_pos, n)) {
                // Each logged row with every query head: [heads · d].
                for i in 0..n {
                    let row: Vec<f32> = (0..heads)
                        .flat_map(|h| &q[(h * n + i) * d..(h * n + i + 1) * d])
                        .copied()
                        .collect();
                    log.push(index, s.start_pos + i, row);
                }
            }
            qs.push(q);
        }
        let items: Vec<AttnSeq> = seqs
            .iter()
            .zip(&qs)
            .map(|(s, q)| AttnSeq {
                q,
                n: s.len(),
                start_pos: s.table.row_of(group, s.start_pos),
                kv: pool
                    .layer_view(s.table.group(group), slot)
                    .with_prefetch(s.len() < paged_attention::PREFETCH_BELOW_ROWS)
                    .with_sinks(self.sinks.as_deref())
                    .with_masked(s.mask.and_then(|m| m.get(index)).map(Vec::as_slice)),
                window,
            })
            .collect();
        let y = paged_attention::paged_attention_batch(&items, heads, kv_heads)?;
        self.o_proj.forward_mask(&y, dense)
    }

    /// The block's matrices: q, k, v, o.
    pub fn matrices(&self) -> Vec<&Linear> {
        vec![&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj]
    }

    /// The per-head vectors it has (q norm, k norm, sinks).
    pub fn vectors(&self) -> Vec<&[f32]> {
        [&self.q_norm, &self.k_norm, &self.sinks]
            .into_iter()
            .flatten()
            .map(Vec::as_slice)
            .collect()
    }
}
