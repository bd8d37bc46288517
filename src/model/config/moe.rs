//! [`MoeConfig`]: a mixture-of-experts block's hyper-parameters and its router's settings.

/// A mixture-of-experts feed-forward block's hyper-parameters (HF `num_experts` /
/// `num_local_experts`, `num_experts_per_tok`, `moe_intermediate_size`, `norm_topk_prob`;
/// GGUF `{arch}.expert_count`, `expert_used_count`, `expert_feed_forward_length`).
///
/// The router: `softmax(x · W_gateᵀ)` over all experts (or a sigmoid per expert,
/// DeepSeek-V3), the `num_experts_per_tok` largest kept (ties to the lower index; within
/// the `topk_group` best of `n_group` expert groups when grouped), their weights divided by
/// their sum when `norm_topk_prob` (Mixtral always; Qwen3-MoE as its config says, llama.cpp
/// always), then multiplied by `routed_scaling_factor`. DeepSeek adds shared experts that
/// every row runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeConfig {
    /// Experts per layer.
    pub num_experts: usize,
    /// Experts each token is routed to (top-k).
    pub num_experts_per_tok: usize,
    /// Each expert's intermediate size (its gate/up rows, its down columns).
    pub moe_intermediate_size: usize,
    /// Renormalize the chosen experts' weights to sum to 1. gpt-oss's router (a softmax
    /// over the k chosen logits, llama.cpp's `SOFTMAX_WEIGHT` gating) is this one with the
    /// renormalization: `e^l_i / Σ_chosen e^l_j` either way.
    pub norm_topk_prob: bool,
    /// Experts every row runs beside its routed ones, as one gated MLP of
    /// `num_shared_experts · moe_intermediate_size` (DeepSeek `n_shared_experts`; GGUF
    /// `expert_shared_count`); 0: none.
    pub num_shared_experts: usize,
    /// How the router's logits become the scores experts are chosen by.
    pub scoring: MoeScoring,
    /// The routed experts' weights are multiplied by this after any renormalization
    /// (DeepSeek `routed_scaling_factor`; GGUF `expert_weights_scale`); 1: unchanged.
    pub routed_scaling_factor: f32,
    /// Expert groups (DeepSeek `n_group`; GGUF `expert_group_count`): the experts are split
    /// into this many equal groups and a row picks its experts from its `topk_group` best
    /// groups only. 1: no grouping.
    pub n_group: usize,
    /// Groups a row keeps (DeepSeek `topk_group`; GGUF `expert_group_used_count`).
    pub topk_group: usize,
    /// Leading layers with a dense MLP of `intermediate_size` instead of experts (DeepSeek
    /// `first_k_dense_replace`; GGUF `leading_dense_block_count`).
    pub first_k_dense_replace: usize,
}

/// How a router's logits become expert scores (HF `scoring_func`; GGUF
/// `expert_gating_func`: 1 softmax, 2 sigmoid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MoeScoring {
    /// A softmax over all experts (Mixtral, Qwen3-MoE, DeepSeek-V2).
    #[default]
    Softmax,
    /// A sigmoid per expert, chosen by score plus a learned per-expert bias that does not
    /// enter the weights (DeepSeek-V3's `e_score_correction_bias`, GGUF `exp_probs_b`; its
    /// groups are ranked by the sum of their two best biased scores).
    Sigmoid,
}

/// The most experts per layer a file may declare (the largest published models have 256 or
/// 384; bounds the per-layer lists a header sizes).
pub const MAX_EXPERTS: usize = 4096;

impl MoeConfig {
    /// A plain router: softmax, no shared experts, no groups, no scaling, no dense layers.
    pub fn plain(
        num_experts: usize,
        num_experts_per_tok: usize,
        moe_intermediate_size: usize,
        norm_topk_prob: bool,
    ) -> MoeConfig {
        MoeConfig {
            num_experts,
            num_experts_per_tok,
            moe_intermediate_size,
            norm_topk_prob,
            num_shared_experts: 0,
            scoring: MoeScoring::Softmax,
            routed_scaling_factor: 1.0,
            n_group: 1,
            topk_group: 1,
            first_k_dense_replace: 0,
        }
    }

    /// Whether layer `layer` holds experts (not one of the leading dense layers).
    pub fn is_moe_layer(&self, layer: usize) -> bool {
        layer >= self.first_k_dense_replace
    }

    /// Check the numbers: `key` prefixes the names in errors (`qwen3moe.` or ``).
    /// Errors: no experts, more than [`MAX_EXPERTS`], top-k 0 or above the expert count, an
    /// intermediate size of 0.
    pub fn validate(&self, count_key: &str, used_key: &str, ffn_key: &str) -> anyhow::Result<()> {
        let (e, k) = (self.num_experts, self.num_experts_per_tok);
        if e == 0 || e > MAX_EXPERTS {
            anyhow::bail!(
                "{count_key} is {e}: a mixture of experts needs 1 to {MAX_EXPERTS} experts"
            );
        }
        if k == 0 || k > e {
            anyhow::bail!("{used_key} is {k}: each token must use 1 to {count_key} ({e}) experts");
        }
        if self.moe_intermediate_size == 0 {
            anyhow::bail!("{ffn_key} is 0");
        }
        let (g, kg) = (self.n_group, self.topk_group);
        if g == 0 || !e.is_multiple_of(g) || kg == 0 || kg > g || k > kg * (e / g) {
            anyhow::bail!(
                "expert groups {g} (keeping {kg}) do not split {e} experts into equal groups holding the {k} chosen ones"
            );
        }
        if !(self.routed_scaling_factor.is_finite() && self.routed_scaling_factor > 0.0) {
            anyhow::bail!(
                "routed_scaling_factor is {}: expected a positive number",
                self.routed_scaling_factor
            );
        }
        Ok(())
    }
}
