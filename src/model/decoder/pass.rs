//! [`LayerPass`]: what every block of a layer is handed by the forward pass around it.
use crate::model::config::ModelConfig;
use crate::model::ops::Rope;

/// What every block of one layer needs from the forward pass around it.
pub struct LayerPass<'a> {
    /// The model's hyper-parameters.
    pub config: &'a ModelConfig,
    /// The layer's index (its KV group and slot, its window).
    pub index: usize,
    /// The RoPE tables this layer rotates Q and K with (a sliding layer's own base).
    pub rope: &'a Rope,
    /// Per row of the pass, `[Σ n]`: true for a row on the prefill kernels (design rule R1).
    pub dense: &'a [bool],
    /// Which path an MLA block's rows attend by.
    pub mla_path: MlaPath,
}

/// Which path MLA's rows attend by (`nanollm bench --mla-path`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MlaPath {
    /// Prompt rows expanded, generated rows absorbed (vLLM's and FlashMLA's split).
    #[default]
    Auto,
    /// Every row expanded: each step rebuilds every head's K and V from the latents.
    Expanded,
    /// Every row absorbed: prompts too attend over the latents as MQA.
    Absorbed,
}
