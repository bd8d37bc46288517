//! The types both MLA paths share: the block's weights, a run of rows on one path, the
//! projected queries, and each head's map on the decode kernels.
use crate::kernels::gemm::DenseMatrix;
use crate::model::config::MlaConfig;
use crate::model::linear::Linear;
use candle_core::Result;

/// The query projection: one matrix (DeepSeek-V2-Lite `q_proj`), or the low-rank pair with
/// an RMSNorm between (`q_a_proj`, `q_a_layernorm`, `q_b_proj`).
#[derive(Debug, Clone)]
pub enum MlaQuery {
    /// `[heads · (qk_nope + qk_rope), hidden_size]`.
    Plain(Linear),
    /// `a`: `[q_lora_rank, hidden_size]`, `norm`: `[q_lora_rank]`, `b`: `[heads · (qk_nope
    /// + qk_rope), q_lora_rank]`.
    LowRank {
        /// Down-projection.
        a: Linear,
        /// RMSNorm weight between the two.
        norm: Vec<f32>,
        /// Up-projection.
        b: Linear,
    },
}

/// An MLA block's weights (HF DeepSeek names; GGUF `attn_q`, `attn_q_a`, `attn_q_a_norm`,
/// `attn_q_b`, `attn_kv_a_mqa`, `attn_kv_a_norm`, `attn_k_b`, `attn_v_b` or the older
/// `attn_kv_b`, `attn_output`).
#[derive(Debug, Clone)]
pub struct Mla {
    /// The query projection.
    pub q: MlaQuery,
    /// `kv_a_proj_with_mqa`: `[kv_lora_rank + qk_rope_head_dim, hidden_size]`.
    pub kv_a_proj: Linear,
    /// `kv_a_layernorm`'s weight, `[kv_lora_rank]`.
    pub kv_a_norm: Vec<f32>,
    /// Per head, `W_UKᵀ_h`: `[kv_lora_rank, qk_nope_head_dim]` (GGUF `attn_k_b`): the
    /// absorbed path's query map, on the decode kernels.
    pub k_b: Vec<Linear>,
    /// Per head, `W_UV_h`: `[v_head_dim, kv_lora_rank]` (GGUF `attn_v_b`): the absorbed
    /// path's output map, on the decode kernels.
    pub v_b: Vec<Linear>,
    /// Every head's `W_UK` stacked, `[heads · qk_nope_head_dim, kv_lora_rank]`, f32 packed for
    /// the prefill GEMM: the expanded path's key map.
    pub k_up: DenseMatrix,
    /// Every head's `W_UV` stacked, `[heads · v_head_dim, kv_lora_rank]`, f32 packed: the
    /// expanded path's value map.
    pub v_up: DenseMatrix,
    /// `o_proj`: `[hidden_size, heads · v_head_dim]`.
    pub o_proj: Linear,
}

/// One run of rows of one sequence that take the same path: rows `first .. first + rows`
/// of sequence `seq`, at positions `start ..`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    pub(super) seq: usize,
    /// The sequence's first row in the pass (`[Σ n]` numbering).
    pub(super) base: usize,
    pub(super) first: usize,
    pub(super) rows: usize,
    pub(super) start: usize,
}

/// Each head's map on its own `rows` rows: `xs[h]` (`[rows, cols]`) through `maps[h]`, on the
/// decode kernels (R1: a row at a time). With every map on our quantized kernels, all heads
/// run in one parallel region (one region per head was 2 · heads regions a layer).
///
/// Errors: kernel errors, shapes that do not match.
pub(super) fn per_head(maps: &[Linear], xs: &[Vec<f32>], rows: usize) -> Result<Vec<Vec<f32>>> {
    use crate::kernels::matmul::{matmul_sets, QuantMatrix};
    let quant: Option<Vec<[&QuantMatrix; 1]>> = maps
        .iter()
        .map(|l| match (&l.quant, &l.bias) {
            (Some(q), None) => Some([q]),
            _ => None,
        })
        .collect();
    if let Some(mats) = quant {
        let sets: Vec<(&[&QuantMatrix], &[f32])> =
            mats.iter().zip(xs).map(|(m, x)| (&m[..], &x[..])).collect();
        let out = matmul_sets(&sets).map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
        return Ok(out
            .into_iter()
            .map(|mut y| y.pop().unwrap_or_default())
            .collect());
    }
    let decode = vec![false; rows];
    maps.iter()
        .zip(xs)
        .map(|(l, x)| l.forward_mask(x, &decode))
        .collect()
}

/// What both paths read: the config, the projected queries, the rotated RoPE queries.
pub(super) struct Ctx<'a> {
    pub(super) m: &'a MlaConfig,
    pub(super) heads: usize,
    /// `[Σ n, heads, qk_nope + qk_rope]`, unscaled.
    pub(super) q: &'a [f32],
    /// Per sequence, `[heads, n, qk_rope]`, rotated and scaled.
    pub(super) q_rope: &'a [Vec<f32>],
    /// The score scale.
    pub(super) scale: f32,
}

impl Ctx<'_> {
    /// Row `r` of the pass, head `h`: its unscaled `q_nope` (`qk_nope_head_dim` values).
    pub(super) fn q_nope(&self, r: usize, h: usize) -> &[f32] {
        let qd = self.m.q_head_dim();
        &self.q[(r * self.heads + h) * qd..][..self.m.qk_nope_head_dim]
    }

    /// Segment row `i`, head `h`: its rotated, scaled `q_rope`.
    pub(super) fn q_rope(&self, seg: &Segment, i: usize, h: usize) -> &[f32] {
        let rope_d = self.m.qk_rope_head_dim;
        let qr = &self.q_rope[seg.seq];
        let n = qr.len() / (self.heads * rope_d).max(1);
        &qr[(h * n + seg.first + i) * rope_d..][..rope_d]
    }
}

/// The per-head maps of a fused `kv_b_proj` (`[heads · (qk_nope + v_head_dim),
/// kv_lora_rank]` row-major, each head's `W_UK_h` rows then its `W_UV_h` rows, as HF
/// checkpoints and older GGUFs store it): per head `W_UKᵀ_h` (`[kv_lora_rank, qk_nope]`) and
/// `W_UV_h` (`[v_head_dim, kv_lora_rank]`) as f32 maps for the absorbed path, and every
/// head's `W_UK` and `W_UV` stacked (`[heads · qk_nope, kv_lora_rank]`,
/// `[heads · v_head_dim, kv_lora_rank]`) for the expanded path.
///
/// Errors: `all` not `heads · (nope + vd) · lora` values; tensor construction.
#[allow(clippy::type_complexity)]
pub fn split_kv_b(
    all: &[f32],
    (heads, nope, vd, lora): (usize, usize, usize, usize),
    device: &candle_core::Device,
) -> Result<(Vec<Linear>, Vec<Linear>, Vec<f32>, Vec<f32>)> {
    if all.len() != heads * (nope + vd) * lora {
        candle_core::bail!(
            "kv_b_proj has {} values, expected {heads} heads × ({nope} + {vd}) × {lora}",
            all.len()
        );
    }
    let dense = |v: Vec<f32>, dims: (usize, usize)| -> Result<Linear> {
        Ok(Linear::dense_f32(
            candle_core::Tensor::from_vec(v, dims, device)?,
            None,
        ))
    };
    let (mut w_uk, mut w_uv) = (Vec::new(), Vec::new());
    let (mut k_b, mut v_b) = (Vec::new(), Vec::new());
    for head in all.chunks_exact((nope + vd) * lora) {
        let (uk, uv) = head.split_at(nope * lora);
        w_uk.extend_from_slice(uk);
        w_uv.extend_from_slice(uv);
        let mut t = vec![0f32; lora * nope];
        for i in 0..nope {
            for c in 0..lora {
                t[c * nope + i] = uk[i * lora + c];
            }
        }
        k_b.push(dense(t, (lora, nope))?);
        v_b.push(dense(uv.to_vec(), (vd, lora))?);
    }
    Ok((k_b, v_b, w_uk, w_uv))
}
