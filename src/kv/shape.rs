//! [`KvShape`]: what one token costs in a plain (MHA/GQA/MQA) attention KV cache.
//!
//! Shared by the runtime block pool ([`crate::kv::KvPool`]) and the `kv-size` estimator, so the
//! estimate and the bytes the engine really allocates come from the same arithmetic.

/// Element type of a KV cache and its storage cost.
///
/// Block formats carry their scales: `Q8_0` is 34 bytes per 32 values (32 int8 + one f16
/// scale), `Q4_0` and `Iq4Nl` are 18 bytes per 32 values (an f16 scale and 32 nibbles;
/// ggml's block layouts `block_q8_0`, `block_q4_0`, `block_iq4_nl` in ggml-common.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvDtype {
    /// 4 bytes per value.
    F32,
    /// 2 bytes per value.
    F16,
    /// 2 bytes per value.
    Bf16,
    /// 1 byte per value (e4m3/e5m2; per-tensor scales are negligible and not counted).
    Fp8,
    /// 1 byte per value (per-tensor scales not counted).
    Int8,
    /// ggml Q8_0: 34 bytes per block of 32 values.
    Q8_0,
    /// ggml Q4_0: 18 bytes per block of 32 values.
    Q4_0,
    /// ggml IQ4_NL: 18 bytes per block of 32 values (an f16 scale and 32 4-bit indices into
    /// ggml's non-linear codebook `kvalues_iq4nl`).
    Iq4Nl,
    /// Q4_0 of the row after a Hadamard rotation in groups of up to 128 values
    /// (`kv::codec_q4::rotation_groups`) (`q4_0r`; llama.cpp rotates
    /// its quantized K/V the same way by default): 18 bytes per 32 values.
    Q4_0R,
    /// IQ4_NL of the row after the same rotation (`iq4_nlr`): 18 bytes
    /// per 32 values.
    Iq4NlR,
}

impl serde::Serialize for KvDtype {
    /// As its command-line name ([`KvDtype::name`]).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl KvDtype {
    /// (bytes per block, values per block); plain types are blocks of one value.
    pub fn block(self) -> (u64, u64) {
        match self {
            KvDtype::F32 => (4, 1),
            KvDtype::F16 | KvDtype::Bf16 => (2, 1),
            KvDtype::Fp8 | KvDtype::Int8 => (1, 1),
            KvDtype::Q8_0 => (34, 32),
            KvDtype::Q4_0 | KvDtype::Iq4Nl | KvDtype::Q4_0R | KvDtype::Iq4NlR => (18, 32),
        }
    }

    /// Bytes taken by `values` values, rounded up to whole blocks; `None` on overflow.
    pub fn bytes_for(self, values: u64) -> Option<u64> {
        let (bytes, per) = self.block();
        values.div_ceil(per).checked_mul(bytes)
    }

    /// The name used on the command line and in reports (`f32`, `bf16`, `q8_0`, ...).
    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F32 => "f32",
            KvDtype::F16 => "f16",
            KvDtype::Bf16 => "bf16",
            KvDtype::Fp8 => "fp8",
            KvDtype::Int8 => "int8",
            KvDtype::Q8_0 => "q8_0",
            KvDtype::Q4_0 => "q4_0",
            KvDtype::Iq4Nl => "iq4_nl",
            KvDtype::Q4_0R => "q4_0r",
            KvDtype::Iq4NlR => "iq4_nlr",
        }
    }

    /// Whether rows are stored rotated (a Hadamard transform of each group of
    /// `kv::codec_q4::rotation_groups` before
    /// quantizing): attention then rotates the queries and un-rotates its output
    /// (`kv::codec_q4::rotate`).
    pub fn rotated(self) -> bool {
        matches!(self, KvDtype::Q4_0R | KvDtype::Iq4NlR)
    }

    /// Parse a name as printed by [`KvDtype::name`] (case-insensitive; `fp16`, `half`, `fp32`
    /// and `float32` are accepted aliases). Errors: `None` for anything else.
    pub fn parse(s: &str) -> Option<KvDtype> {
        Some(match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => KvDtype::F32,
            "f16" | "fp16" | "half" | "float16" => KvDtype::F16,
            "bf16" | "bfloat16" => KvDtype::Bf16,
            "fp8" | "f8" | "fp8_e4m3" | "fp8_e5m2" => KvDtype::Fp8,
            "int8" | "i8" => KvDtype::Int8,
            "q8_0" => KvDtype::Q8_0,
            "q4_0" => KvDtype::Q4_0,
            "iq4_nl" => KvDtype::Iq4Nl,
            "q4_0r" => KvDtype::Q4_0R,
            "iq4_nlr" => KvDtype::Iq4NlR,
            _ => return None,
        })
    }
}

/// Shape of an attention KV cache: per layer, one K and one V tensor of
/// `[batch, num_key_value_heads, seq, head_dim]` (MHA, GQA, MQA), or, for multi-head latent
/// attention ([`KvShape::latent`]), one latent row of `head_dim` values per token.
///
/// Source of the fields: `num_hidden_layers`, `num_key_value_heads` (absent means
/// `num_attention_heads`), `head_dim` (absent means `hidden_size / num_attention_heads`) of an
/// HF config.json, or `{arch}.block_count`, `{arch}.attention.head_count_kv`,
/// `{arch}.attention.key_length` of GGUF metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    /// Layers that hold a KV cache (`num_hidden_layers`).
    pub num_layers: usize,
    /// K/V heads per layer (`num_key_value_heads`).
    pub num_key_value_heads: usize,
    /// Values per head (`head_dim`).
    pub head_dim: usize,
    /// Storage type of the cached values.
    pub dtype: KvDtype,
    /// A multi-head latent attention cache (DeepSeek-V2, arXiv:2405.04434): one row per token
    /// per layer, `num_key_value_heads` = 1 and `head_dim` = `kv_lora_rank +
    /// qk_rope_head_dim`, read as the key; its first `kv_lora_rank` values are the value, so
    /// no V rows are stored. False: K and V rows of every KV head.
    pub latent: bool,
}

impl KvShape {
    /// Rows stored per token, layer and KV head: 2 (K and V), or 1 for a latent cache.
    pub fn parts(&self) -> usize {
        match self.latent {
            true => 1,
            false => 2,
        }
    }

    /// Values one token adds to one layer: K and V, `2 · num_key_value_heads · head_dim`
    /// (the latent's `head_dim` for MLA).
    pub fn values_per_token_per_layer(&self) -> u64 {
        self.parts() as u64 * self.num_key_value_heads as u64 * self.head_dim as u64
    }

    /// Bytes one token adds to one layer's cache (K and V, or the latent), block formats
    /// rounded per head.
    pub fn bytes_per_token_per_layer(&self) -> u64 {
        // Block formats quantize each head's row of head_dim values on its own.
        let per_head = self
            .dtype
            .bytes_for(self.head_dim as u64)
            .unwrap_or(u64::MAX);
        (self.parts() as u64)
            .saturating_mul(self.num_key_value_heads as u64)
            .saturating_mul(per_head)
    }

    /// Bytes one token adds to the whole cache: `2 · L · H_kv · head_dim · bytes`.
    pub fn bytes_per_token(&self) -> u64 {
        self.bytes_per_token_per_layer()
            .saturating_mul(self.num_layers as u64)
    }

    /// Bytes held for `tokens` tokens of one sequence: `2 · L · T · H_kv · head_dim · bytes`.
    /// Errors: `None` when the product overflows 64 bits.
    pub fn bytes(&self, tokens: u64) -> Option<u64> {
        self.bytes_per_token_per_layer()
            .checked_mul(self.num_layers as u64)?
            .checked_mul(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_formats_count_their_scales() {
        assert_eq!(KvDtype::Q8_0.bytes_for(128), Some(4 * 34));
        assert_eq!(KvDtype::Q4_0.bytes_for(128), Some(4 * 18));
        assert_eq!(KvDtype::Q4_0.bytes_for(33), Some(2 * 18));
        assert_eq!(KvDtype::Iq4Nl.bytes_for(64), Some(2 * 18));
        assert_eq!(KvDtype::parse("IQ4_NL"), Some(KvDtype::Iq4Nl));
        assert_eq!(KvDtype::Bf16.bytes_for(128), Some(256));
    }

    #[test]
    fn smollm2_135m_f32_bytes_per_token() {
        // SmolLM2-135M: 30 layers, 3 KV heads, head_dim 64 (576 / 9), cached as f32.
        let s = KvShape {
            num_layers: 30,
            num_key_value_heads: 3,
            head_dim: 64,
            dtype: KvDtype::F32,
            latent: false,
        };
        assert_eq!(s.bytes_per_token(), 2 * 30 * 3 * 64 * 4);
        assert_eq!(s.bytes(100), Some(2 * 30 * 3 * 64 * 4 * 100));
        assert_eq!(s.bytes(u64::MAX), None);
    }
}
