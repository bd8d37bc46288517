//! [`DecoderWeights`]: all of a decoder's weights, as the loaders (`model::gguf`,
//! `model::safetensors`) build them: the embedding, one [`LayerWeights`] per layer, the
//! final norm and the LM head.
use crate::model::decoder::layer::LayerWeights;
use crate::model::embedding::Embedding;
use crate::model::linear::Linear;

/// All the decoder's weights.
#[derive(Debug, Clone)]
pub struct DecoderWeights {
    /// Token embedding, `[vocab_size, hidden_size]`: f32 rows, or quantized rows dequantized
    /// on lookup (shared with a tied LM head).
    pub embed_tokens: Embedding,
    /// One entry per layer.
    pub layers: Vec<LayerWeights>,
    /// Final RMSNorm weight, `[hidden_size]`.
    pub norm: Vec<f32>,
    /// LM head, `[vocab_size, hidden_size]` (the embedding when tied).
    pub lm_head: Linear,
}
