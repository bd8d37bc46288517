//! [`RopeTables`]: the decoder's RoPE tables (Su et al. 2021) and which of them each layer
//! rotates with: the global base with its scaling, or the sliding layers' own unscaled base
//! (Gemma 3's `rope_local_base_freq`).
use crate::model::config::ModelConfig;
use crate::model::ops::Rope;
use crate::model::rope::{self, RopeScaling};

/// cos and sin of position · θ_i, `[positions, head_dim / 2]`, grown on demand.
#[derive(Debug, Clone)]
pub struct RopeTables {
    /// The global tables: θ_i from `rope_theta` and its scaling, times YaRN's attention
    /// factor.
    global: Rope,
    /// The sliding-window layers' tables when they have their own base
    /// (`rope_local_theta`).
    local: Option<Rope>,
}

impl RopeTables {
    /// The tables for `config`: θ_i from [`ModelConfig::rope_inv_freq`] (plain
    /// `rope_theta^(-2i/head_dim)`, or rescaled by linear / llama3 / YaRN scaling and GGUF
    /// frequency factors) times YaRN's attention factor, and the sliding layers' unscaled
    /// ones from `rope_local_theta`; built for the first positions, grown on demand up to
    /// `max_position_embeddings` ([`Rope`]).
    pub fn new(config: &ModelConfig) -> RopeTables {
        let (inv_freq, attention_factor) = config.rope_inv_freq();
        let inv_freq: Vec<f32> = inv_freq.iter().map(|&f| f as f32).collect();
        let local = config.rope_local_theta.map(|theta| {
            let f = rope::inv_freq(config.rope_dim(), theta, &RopeScaling::Default, None);
            let f: Vec<f32> = f.iter().map(|&x| x as f32).collect();
            Rope::new(
                f,
                1.0,
                config.rope_interleaved,
                config.max_position_embeddings,
            )
        });
        RopeTables {
            local,
            global: Rope::new(
                inv_freq,
                attention_factor as f32,
                config.rope_interleaved,
                config.max_position_embeddings,
            ),
        }
    }

    /// The tables a layer with sliding window `window` (None: a global layer) rotates with.
    pub fn for_layer(&self, window: Option<usize>) -> &Rope {
        match (window, &self.local) {
            (Some(_), Some(local)) => local,
            _ => &self.global,
        }
    }
}
