//! MLA's absorbed path: each head's query becomes a latent query `[W_UKᵀ_h · q_nope ;
//! q_rope]` (576 values), every head attends over the cached latents as one KV head (MQA,
//! the value being the latent itself, of which the first `kv_lora_rank` values are kept),
//! and `W_UV_h` maps each head's weighted latent to its `v_head_dim` output. The per-head
//! maps run on the decode kernels, a row at a time (R1); the attention is the paged kernel
//! over the pool, for the segments of every sequence in one call.
use super::shared::{Ctx, Mla, Segment};
use crate::kv::LayerKv;
use crate::model::paged_attention::{paged_attention_batch, AttnSeq, Window};
use candle_core::Result;

/// Per segment, its rows of attention output, `[rows, heads · v_head_dim]`. `views[i]`: the
/// layer of segment i's sequence in the pool.
///
/// Errors: kernel errors.
pub(super) fn attend(
    block: &Mla,
    ctx: &Ctx,
    segs: &[Segment],
    views: Vec<LayerKv>,
) -> Result<Vec<Vec<f32>>> {
    let m = ctx.m;
    let (heads, lora, vd) = (ctx.heads, m.kv_lora_rank, m.v_head_dim);
    let w = m.latent_width();
    let total: usize = segs.iter().map(|s| s.rows).sum();
    // Per head: every row's q_nope through W_UKᵀ_h, `[total, kv_lora_rank]`.
    let xs: Vec<Vec<f32>> = (0..heads)
        .map(|h| {
            let mut x = Vec::with_capacity(total * m.qk_nope_head_dim);
            for s in segs {
                for i in 0..s.rows {
                    x.extend_from_slice(ctx.q_nope(s.base + s.first + i, h));
                }
            }
            x
        })
        .collect();
    let q_latent = super::shared::per_head(&block.k_b, &xs, total)?;
    // Per segment, its queries `[heads, rows, w]`: the latent query scaled, then q_rope.
    let mut qs = Vec::with_capacity(segs.len());
    let mut at = 0;
    for s in segs {
        let mut q = Vec::with_capacity(heads * s.rows * w);
        for (h, ql) in q_latent.iter().enumerate() {
            for i in 0..s.rows {
                q.extend(ql[(at + i) * lora..][..lora].iter().map(|x| x * ctx.scale));
                q.extend_from_slice(ctx.q_rope(s, i, h));
            }
        }
        qs.push(q);
        at += s.rows;
    }
    let items: Vec<AttnSeq> = segs
        .iter()
        .zip(&qs)
        .zip(views)
        .map(|((s, q), kv)| AttnSeq {
            q,
            n: s.rows,
            start_pos: s.start,
            kv,
            window: Window::FULL,
        })
        .collect();
    // `[total, heads · w]`: each head's weighted sum of whole latent rows.
    let out = paged_attention_batch(&items, heads, 1)?;
    // Per head: its weighted latents through W_UV_h, `[total, v_head_dim]`.
    let xs: Vec<Vec<f32>> = (0..heads)
        .map(|h| {
            out.chunks_exact(heads * w)
                .flat_map(|row| &row[h * w..h * w + lora])
                .copied()
                .collect()
        })
        .collect();
    let per_head = super::shared::per_head(&block.v_b, &xs, total)?;
    let mut outs = Vec::with_capacity(segs.len());
    let mut at = 0;
    for s in segs {
        let mut y = Vec::with_capacity(s.rows * heads * vd);
        for i in 0..s.rows {
            for ph in &per_head {
                y.extend_from_slice(&ph[(at + i) * vd..][..vd]);
            }
        }
        outs.push(y);
        at += s.rows;
    }
    Ok(outs)
}
