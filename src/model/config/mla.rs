//! [`MlaConfig`]: multi-head latent attention's shape (DeepSeek-AI 2024, "DeepSeek-V2",
//! arXiv:2405.04434, §2.1).

/// Largest MLA width accepted (`kv_lora_rank`, each head's key and value parts): DeepSeek-V3's
/// are 512, 128 + 64 and 128, so files beyond it are damaged, not models.
pub const MAX_MLA_WIDTH: usize = 1 << 16;

/// Multi-head latent attention's hyper-parameters (HF DeepSeek-V2/V3 config.json keys; GGUF
/// `{arch}.attention.q_lora_rank`, `kv_lora_rank`, `key_length_mla`, `value_length_mla`,
/// `rope.dimension_count`).
///
/// Per token a layer projects the hidden state to a latent `c_KV` of `kv_lora_rank` values
/// (RMS-normed) and one decoupled RoPE key of `qk_rope_head_dim` values shared by every
/// head: the cache holds those `kv_lora_rank + qk_rope_head_dim` values. Head `h`'s key is
/// `[W_UK_h · c_KV ; k_rope]` (`qk_nope_head_dim + qk_rope_head_dim` values), its value
/// `W_UV_h · c_KV` (`v_head_dim`), where `[W_UK; W_UV]` is `kv_b_proj`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MlaConfig {
    /// Rank of the query's low-rank projection (`q_a_proj` → norm → `q_b_proj`); `None`: one
    /// `q_proj` (DeepSeek-V2-Lite).
    pub q_lora_rank: Option<usize>,
    /// Values of the cached latent `c_KV` (`kv_lora_rank`, 512 in DeepSeek-V2/V3).
    pub kv_lora_rank: usize,
    /// Per-head query/key values without RoPE (`qk_nope_head_dim`, 128).
    pub qk_nope_head_dim: usize,
    /// Per-head query values and shared key values with RoPE (`qk_rope_head_dim`, 64).
    pub qk_rope_head_dim: usize,
    /// Per-head value values (`v_head_dim`, 128).
    pub v_head_dim: usize,
    /// Scores are scaled by `(qk_nope_head_dim + qk_rope_head_dim)^−½` times this: YaRN's
    /// `mscale(factor, mscale_all_dim)²` (`0.1 · mscale_all_dim · ln(factor) + 1`, squared;
    /// HF `DeepseekV2Attention.softmax_scale`), 1 without YaRN.
    pub score_factor: f64,
}

impl MlaConfig {
    /// Values of one cached row: `kv_lora_rank + qk_rope_head_dim` (576).
    pub fn latent_width(&self) -> usize {
        self.kv_lora_rank + self.qk_rope_head_dim
    }

    /// Values of one head's query and key: `qk_nope_head_dim + qk_rope_head_dim` (192).
    pub fn q_head_dim(&self) -> usize {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }

    /// Check the numbers; `keys` names them in errors (`kv_lora_rank`, ...). Errors: a rank
    /// or head dimension of 0, an odd RoPE dimension, a q LoRA rank of 0, a score factor that
    /// is not a positive number.
    pub fn validate(&self) -> anyhow::Result<()> {
        let checks = [
            (self.kv_lora_rank == 0, "kv_lora_rank is 0"),
            (self.qk_nope_head_dim == 0, "qk_nope_head_dim is 0"),
            (
                self.qk_rope_head_dim == 0 || !self.qk_rope_head_dim.is_multiple_of(2),
                "qk_rope_head_dim must be even and positive",
            ),
            (self.v_head_dim == 0, "v_head_dim is 0"),
            (self.q_lora_rank == Some(0), "q_lora_rank is 0"),
            (
                !(self.score_factor.is_finite() && self.score_factor > 0.0),
                "the YaRN score factor is not a positive number",
            ),
        ];
        for (bad, what) in checks {
            if bad {
                anyhow::bail!("invalid MLA config: {what}");
            }
        }
        // Every stored row is whole blocks of 32 for the block KV dtypes.
        Ok(())
    }
}
