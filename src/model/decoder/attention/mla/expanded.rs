//! MLA's expanded path: the latents of positions `0 ..` a segment's last row, read back from
//! the pool, become every head's K `[W_UK_h · c ; k_rope]` and V `W_UV_h · c` (the packed f32
//! GEMM, whose result for a row does not depend on the rows beside it), and the segment's
//! rows attend over them as multi-head attention with the paged kernels (R4's key ranges).
use super::shared::{Ctx, Mla, Segment};
use crate::kv::codec::decode_row;
use crate::kv::{KvPart, LayerKv};
use crate::model::paged_attention::{paged_attention_in, Window};
use candle_core::Result;

/// The segment's rows of attention output, `[rows, heads · v_head_dim]`. `kv`: the layer of
/// the sequence's pool, already holding the segment's latents.
///
/// Errors: kernel errors (shapes, positions past the table).
pub(super) fn attend(block: &Mla, ctx: &Ctx, seg: &Segment, kv: &LayerKv) -> Result<Vec<f32>> {
    let m = ctx.m;
    let (heads, lora, nope, rope_d) = (
        ctx.heads,
        m.kv_lora_rank,
        m.qk_nope_head_dim,
        m.qk_rope_head_dim,
    );
    let vd = m.v_head_dim;
    let w = m.latent_width();
    let len = seg.start + seg.rows;
    if len > kv.capacity() {
        candle_core::bail!("MLA attention past the block table: {len} positions");
    }
    // The latents as stored (R2), back in the unrotated space for a rotated dtype.
    let mut latent = vec![0f32; w];
    let mut c_kv = Vec::with_capacity(len * lora);
    let mut k_rope = Vec::with_capacity(len * rope_d);
    for j in 0..len {
        decode_row(kv.dtype, kv.row(KvPart::K, 0, j), &mut latent);
        if kv.dtype.rotated() {
            crate::kv::codec_q4::rotate(&mut latent);
        }
        c_kv.extend_from_slice(&latent[..lora]);
        k_rope.extend_from_slice(&latent[lora..]);
    }
    let k_nope = block.k_up.matmul(&c_kv).map_err(err)?;
    let v = block.v_up.matmul(&c_kv).map_err(err)?;
    // One width for K and V rows (the kernels take one head_dim): V padded with zeros,
    // whose products add exact zeros.
    let d = (nope + rope_d).max(vd);
    let mut kv_rows = vec![0f32; 2 * heads * len * d];
    let (k_part, v_part) = kv_rows.split_at_mut(heads * len * d);
    for h in 0..heads {
        for j in 0..len {
            let k = &mut k_part[(h * len + j) * d..][..d];
            k[..nope].copy_from_slice(&k_nope[(j * heads + h) * nope..][..nope]);
            k[nope..nope + rope_d].copy_from_slice(&k_rope[j * rope_d..][..rope_d]);
            let vr = &mut v_part[(h * len + j) * d..][..d];
            vr[..vd].copy_from_slice(&v[(j * heads + h) * vd..][..vd]);
        }
    }
    // SAFETY: a view of the f32 buffer's bytes (u8 has no alignment or validity needs); the
    // kernels read them back as f32 through the buffer's own (4-byte aligned) address.
    let bytes =
        unsafe { std::slice::from_raw_parts(kv_rows.as_ptr() as *const u8, kv_rows.len() * 4) };
    let view = LayerKv::contiguous_f32(bytes, heads, len, d);
    // Queries `[heads, rows, d]`: q_nope scaled, then the rotated (scaled) q_rope.
    let rows = seg.rows;
    let mut q = vec![0f32; heads * rows * d];
    for h in 0..heads {
        for i in 0..rows {
            let o = &mut q[(h * rows + i) * d..][..d];
            for (o, &x) in o[..nope]
                .iter_mut()
                .zip(ctx.q_nope(seg.base + seg.first + i, h))
            {
                *o = x * ctx.scale;
            }
            o[nope..nope + rope_d].copy_from_slice(ctx.q_rope(seg, i, h));
        }
    }
    let out = paged_attention_in(&q, heads, heads, (rows, seg.start), &view, Window::FULL)?;
    let mut y = Vec::with_capacity(rows * heads * vd);
    for row in out.chunks_exact(d) {
        y.extend_from_slice(&row[..vd]);
    }
    Ok(y)
}

fn err(e: anyhow::Error) -> candle_core::Error {
    candle_core::Error::Msg(format!("{e:#}"))
}
