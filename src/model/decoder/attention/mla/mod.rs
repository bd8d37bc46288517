//! Multi-head latent attention (DeepSeek-AI 2024, "DeepSeek-V2", arXiv:2405.04434, §2.1):
//! the cache holds, per token and layer, one latent row `[c_KV ; k_rope]` of
//! `kv_lora_rank + qk_rope_head_dim` values (512 + 64 in DeepSeek-V2/V3) instead of every
//! head's K and V.
//!
//! Two ways to attend over it, chosen by row class (design rule R1), as vLLM and FlashMLA do:
//! - **expanded** (`expanded.rs`, prompt rows): the latents are expanded back into per-head
//!   K `[W_UK·c ; k_rope]` and V `W_UV·c` and the rows attend as multi-head attention —
//!   compute-bound, like MHA's prefill.
//! - **absorbed** (`absorbed.rs`, generated rows): `W_UK` is folded into the query
//!   (`q_latent_h = W_UKᵀ_h · q_nope_h`), the row attends over the latents themselves as MQA
//!   (one KV head of 576 values; the value is the latent's first `kv_lora_rank`), and `W_UV`
//!   is applied to the weighted sum — the fewest bytes read per step.
//!
//! Both read the latents back from the pool in the stored dtype (R2), rotated at their
//! positions and in absolute position order (R4), so naive == KV-cached, chunked ==
//! one-shot and batched == alone hold bit for bit; the two paths agree within rounding.
use crate::kv::{KvPart, KvPool};
use crate::model::batch::SeqChunk;
use crate::model::decoder::pass::LayerPass;
use crate::model::linear::{project_mask, Linear};
use crate::model::ops;
use candle_core::Result;

mod absorbed;
mod expanded;
mod shared;

pub use crate::model::decoder::pass::MlaPath;
pub use shared::{split_kv_b, Mla, MlaQuery};
use shared::{Ctx, Segment};

impl Mla {
    /// Causal self-attention of one layer for the rows of every sequence.
    /// `x`: `[Σ n, hidden_size]` → `[Σ n, hidden_size]`; writes each row's latent into its
    /// slot of `pool` (one row per token: [`crate::kv::KvShape::latent`]).
    ///
    /// Errors: a config without MLA, kernel errors, a pool of another shape.
    pub fn forward(
        &self,
        pass: &LayerPass,
        x: &[f32],
        pool: &mut KvPool,
        seqs: &[SeqChunk],
    ) -> Result<Vec<f32>> {
        let c = pass.config;
        let Some(m) = c.mla else {
            candle_core::bail!("an MLA block in a model without an MLA config");
        };
        let heads = c.num_attention_heads;
        let (lora, rope_d, qd) = (m.kv_lora_rank, m.qk_rope_head_dim, m.q_head_dim());
        let w = m.latent_width();
        let eps = c.rms_norm_eps as f32;
        let dense = pass.dense;
        let total = dense.len();
        let (q, ckv) = self.project(x, dense, eps)?;
        if q.len() != total * heads * qd || ckv.len() != total * w {
            candle_core::bail!("MLA projections do not match the config");
        }
        let scale = c.attention_scale();
        let (group, slot) = pool.groups().slot(pass.index);
        // Per sequence: its latent rows written into its slots; its q_rope rotated at its
        // positions and scaled, `[heads, n, rope]`.
        let mut q_rope = Vec::with_capacity(seqs.len());
        let mut base = 0;
        for s in seqs {
            let (n, p) = (s.len(), s.start_pos);
            let rows = &ckv[base * w..(base + n) * w];
            let c_kv: Vec<f32> = rows
                .chunks_exact(w)
                .flat_map(|r| &r[..lora])
                .copied()
                .collect();
            let c_kv = ops::rms_norm(&c_kv, &self.kv_a_norm, eps);
            let k_rope: Vec<f32> = rows
                .chunks_exact(w)
                .flat_map(|r| &r[lora..])
                .copied()
                .collect();
            let k_rope = pass.rope.heads_major(&k_rope, n, 1, p, true, 1.0, None);
            let mut latent = Vec::with_capacity(n * w);
            for i in 0..n {
                latent.extend_from_slice(&c_kv[i * lora..(i + 1) * lora]);
                latent.extend_from_slice(&k_rope[i * rope_d..(i + 1) * rope_d]);
            }
            // At its rows (fewer than positions past an eviction); rotated at its positions.
            let row = s.table.row_of(group, p);
            pool.write(s.table.group(group), slot, KvPart::K, row, n, &latent);
            let mut qr = Vec::with_capacity(n * heads * rope_d);
            for i in 0..n {
                for h in 0..heads {
                    let at = ((base + i) * heads + h) * qd + m.qk_nope_head_dim;
                    qr.extend_from_slice(&q[at..at + rope_d]);
                }
            }
            q_rope.push(pass.rope.heads_major(&qr, n, heads, p, true, scale, None));
            base += n;
        }
        // Rows by path: per sequence, its prompt rows and its generated rows.
        let (mut expanded_segs, mut absorbed_segs) = (Vec::new(), Vec::new());
        let mut base = 0;
        for (i, s) in seqs.iter().enumerate() {
            let n = s.len();
            let prompt = s.prompt_end.saturating_sub(s.start_pos).min(n);
            for (first, rows, is_prompt) in [(0, prompt, true), (prompt, n - prompt, false)] {
                if rows == 0 {
                    continue;
                }
                let seg = Segment {
                    seq: i,
                    base,
                    first,
                    rows,
                    start: s.table.row_of(group, s.start_pos) + first,
                };
                let expand = match pass.mla_path {
                    MlaPath::Auto => is_prompt,
                    MlaPath::Expanded => true,
                    MlaPath::Absorbed => false,
                };
                match expand {
                    true => expanded_segs.push(seg),
                    false => absorbed_segs.push(seg),
                }
            }
            base += n;
        }
        let vw = heads * m.v_head_dim;
        let mut y = vec![0f32; total * vw];
        let ctx = Ctx {
            m: &m,
            heads,
            q: &q,
            q_rope: &q_rope,
            scale,
        };
        for seg in &expanded_segs {
            let kv = pool.layer_view(seqs[seg.seq].table.group(group), slot);
            let out = expanded::attend(self, &ctx, seg, &kv)?;
            let at = (seg.base + seg.first) * vw;
            y[at..at + out.len()].copy_from_slice(&out);
        }
        // The kernels may skip the weighted sums of the latent's RoPE part (a key only),
        // unless a rotated dtype's Hadamard groups mix it with c_KV's values.
        let dtype = pool.dtype();
        let aligned = !dtype.rotated()
            || crate::kv::codec_q4::rotation_groups(w)
                .iter()
                .scan(0, |at, g| {
                    *at += g;
                    Some(*at)
                })
                .any(|end| end == lora);
        let value_dim = if aligned { lora } else { w };
        if !absorbed_segs.is_empty() {
            let views: Vec<_> = absorbed_segs
                .iter()
                .map(|seg| {
                    pool.layer_view(seqs[seg.seq].table.group(group), slot)
                        .with_prefetch(
                            seg.rows < crate::model::paged_attention::PREFETCH_BELOW_ROWS,
                        )
                        .with_value_dim(value_dim)
                })
                .collect();
            let outs = absorbed::attend(self, &ctx, &absorbed_segs, views)?;
            for (seg, out) in absorbed_segs.iter().zip(outs) {
                let at = (seg.base + seg.first) * vw;
                y[at..at + out.len()].copy_from_slice(&out);
            }
        }
        self.o_proj.forward_mask(&y, dense)
    }

    /// The query `[Σ n, heads · (qk_nope + qk_rope)]` and the compressed KV with its RoPE key
    /// `[Σ n, kv_lora_rank + qk_rope]`, from one pass over `x` for the first projections.
    fn project(&self, x: &[f32], dense: &[bool], eps: f32) -> Result<(Vec<f32>, Vec<f32>)> {
        match &self.q {
            MlaQuery::Plain(q_proj) => {
                let mut out = project_mask(&[q_proj, &self.kv_a_proj], x, dense)?;
                let ckv = out.pop().unwrap_or_default();
                Ok((out.pop().unwrap_or_default(), ckv))
            }
            MlaQuery::LowRank { a, norm, b } => {
                let mut out = project_mask(&[a, &self.kv_a_proj], x, dense)?;
                let ckv = out.pop().unwrap_or_default();
                let qa = ops::rms_norm(&out.pop().unwrap_or_default(), norm, eps);
                Ok((b.forward_mask(&qa, dense)?, ckv))
            }
        }
    }

    /// The block's matrices: the query's, kv_a, each head's k_b and v_b, o.
    pub fn matrices(&self) -> Vec<&Linear> {
        let mut all = match &self.q {
            MlaQuery::Plain(q) => vec![q],
            MlaQuery::LowRank { a, b, .. } => vec![a, b],
        };
        all.push(&self.kv_a_proj);
        all.extend(self.k_b.iter());
        all.extend(self.v_b.iter());
        all.push(&self.o_proj);
        all
    }

    /// The norm weights: the q LoRA's (if any) and kv_a's.
    pub fn vectors(&self) -> Vec<&[f32]> {
        let mut v = Vec::new();
        if let MlaQuery::LowRank { norm, .. } = &self.q {
            v.push(norm.as_slice());
        }
        v.push(self.kv_a_norm.as_slice());
        v
    }
}
