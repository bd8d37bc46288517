//! `--mla-path`: which way multi-head latent attention's rows attend (DeepSeek models).
use crate::model::decoder::attention::MlaPath;

/// `--mla-path`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MlaPathArg {
    /// Prompt rows expanded into per-head K and V (compute-bound, like MHA), generated rows
    /// absorbed (MQA over the cached latents: the fewest bytes), as vLLM and FlashMLA run
    /// them.
    #[default]
    Auto,
    /// Every row expanded: each decode step rebuilds every head's K and V from the latents.
    Expanded,
    /// Every row absorbed: prompts too attend over the latents.
    Absorbed,
}

impl From<MlaPathArg> for MlaPath {
    fn from(a: MlaPathArg) -> MlaPath {
        match a {
            MlaPathArg::Auto => MlaPath::Auto,
            MlaPathArg::Expanded => MlaPath::Expanded,
            MlaPathArg::Absorbed => MlaPath::Absorbed,
        }
    }
}
