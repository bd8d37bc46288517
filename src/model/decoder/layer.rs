//! One decoder layer: its weights ([`LayerWeights`]: norms, an attention block, a
//! feed-forward block) and its forward pass, read top to bottom.
use crate::kv::KvPool;
use crate::model::batch::SeqChunk;
use crate::model::decoder::attention::Attention;
use crate::model::decoder::ffn::FeedForward;
use crate::model::decoder::norm::Norms;
use crate::model::decoder::pass::LayerPass;
use crate::model::linear::Linear;
use crate::model::ops;
use candle_core::Result;

/// One decoder layer's weights: which attention and feed-forward blocks it runs (the
/// architecture's choice, `model::arch`) and the RMSNorms around them.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// The RMSNorm weights before (and, sandwiched, after) each block.
    pub norms: Norms,
    /// The attention block, `[n, hidden_size]` → `[n, hidden_size]`.
    pub attention: Attention,
    /// The feed-forward block, `[n, hidden_size]` → `[n, hidden_size]`.
    pub ffn: FeedForward,
}

impl LayerWeights {
    /// The layer on the residual stream `x` (`[Σ n, hidden_size]`), given `h`, `x` through
    /// the layer's input norm: `x += Attention(h)` (the attention output normed first when
    /// sandwiched), then the FFN on the next norm of `x`. Returns the FFN's output,
    /// `[Σ n, hidden_size]`, not yet added: the caller adds it fused with the next layer's
    /// input norm (the same bits as an add then a norm).
    pub fn forward(
        &self,
        pass: &LayerPass,
        x: &mut [f32],
        h: &[f32],
        pool: &mut KvPool,
        seqs: &[SeqChunk],
    ) -> Result<Vec<f32>> {
        let eps = pass.config.rms_norm_eps as f32;
        let attn = self.attention.forward(pass, h, pool, seqs)?;
        let attn = Norms::output(self.norms.attn_out.as_deref(), attn, eps);
        let h = ops::add_rms_norm(x, &attn, &self.norms.ffn_in, eps);
        let ffn = self.ffn.forward(pass, &h)?;
        Ok(Norms::output(self.norms.ffn_out.as_deref(), ffn, eps))
    }

    /// Every weight matrix of the layer, attention's then the feed-forward's, each in its
    /// block's order (GQA: q, k, v, o; dense: gate, up, down).
    pub fn matrices(&self) -> Vec<&Linear> {
        let mut all = self.attention.matrices();
        all.extend(self.ffn.matrices());
        all
    }
}
