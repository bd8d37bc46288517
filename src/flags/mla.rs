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

impl MlaPathArg {
    /// Set `decoder`'s MLA path. Errors: `expanded` or `absorbed` on a model without
    /// multi-head latent attention (the flag would change nothing; auto is always accepted).
    pub fn apply(self, decoder: &mut crate::model::Decoder) -> anyhow::Result<()> {
        if self != MlaPathArg::Auto && decoder.config().mla.is_none() {
            anyhow::bail!(
                "--mla-path {}: the model has no multi-head latent attention (DeepSeek's MLA); \
                 leave the flag out",
                format!("{self:?}").to_lowercase()
            );
        }
        decoder.set_mla_path(self.into());
        Ok(())
    }
}
