//! [`WeightsHeld`]: the bytes a loaded model's weights occupy in memory, by the form they are
//! held in — our kernels' quantized blocks, the f32 copy dense prefill reads, candle's
//! matrices (types our kernels do not hold, safetensors), f32 embedding rows, and the small
//! f32 vectors (norms, biases). Counted from the buffers themselves (allocated bytes, not
//! pages the OS has touched), for `generate --show-stats` beside the KV cache's bytes.
use crate::model::decoder::weights::DecoderWeights;
use crate::model::embedding::Embedding;
use crate::model::linear::Linear;
use candle_core::quantized::QMatMul;
use serde::Serialize;

/// Bytes of a model's weights, by form.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WeightsHeld {
    /// Our kernels' quantized matrices (repacked GGUF blocks; [`crate::kernels::matmul::QuantMatrix::bytes`]).
    pub quantized_blocks: u64,
    /// The f32 copy the dense prefill GEMM reads (4 bytes per weight, rows padded to panels
    /// of 16), GGUF with `--prefill-kernel dense` or `auto`.
    pub f32_prefill_copy: u64,
    /// candle's matrices: GGUF types our kernels do not hold (their blocks), and safetensors
    /// weights (f32; the dense prefill reads the same storage, counted once).
    pub candle_matrices: u64,
    /// The token embedding as f32 rows (where it is not read from quantized blocks).
    pub embedding_f32: u64,
    /// Norm weights and biases, f32.
    pub vectors: u64,
}

impl WeightsHeld {
    /// All of it.
    pub fn total(&self) -> u64 {
        self.quantized_blocks
            + self.f32_prefill_copy
            + self.candle_matrices
            + self.embedding_f32
            + self.vectors
    }

    /// What `w` holds.
    pub fn of(w: &DecoderWeights) -> WeightsHeld {
        let mut held = WeightsHeld::default();
        let mut vectors = |v: &[f32]| held.vectors += 4 * v.len() as u64;
        vectors(&w.norm);
        for l in &w.layers {
            vectors(&l.norms.attn_in);
            vectors(&l.norms.ffn_in);
            for v in l.attention.vectors() {
                vectors(v);
            }
        }
        // MLA's expansion maps, f32 packed for the prompt rows' GEMM.
        for m in w.layers.iter().filter_map(|l| l.attention.mla()) {
            held.f32_prefill_copy += m.k_up.bytes() + m.v_up.bytes();
        }
        let linears = w.layers.iter().flat_map(|l| l.matrices());
        for lin in linears.chain(std::iter::once(&w.lm_head)) {
            held.add_linear(lin);
        }
        match &w.embed_tokens {
            Embedding::Dense(t) => held.embedding_f32 = 4 * t.elem_count() as u64,
            Embedding::Quantized(m) => held.quantized_blocks += m.bytes(),
            Embedding::TiedLmHead => {} // the LM head's blocks, counted with it
        }
        held
    }

    /// The matrix bytes one token reads (our kernels' blocks, else candle's or the f32
    /// weights): every layer's attention, a dense MLP whole, a mixture of experts' router,
    /// `k` of its `E` experts (the mean expert's bytes times k) and its shared experts, and
    /// the LM head. Equal
    /// to the held matrices for a dense model.
    pub fn active_per_token(w: &DecoderWeights) -> u64 {
        let bytes = |lin: &Linear| {
            let mut one = WeightsHeld::default();
            one.add_linear(lin);
            one.quantized_blocks + one.candle_matrices
        };
        let mut total = bytes(&w.lm_head);
        for l in &w.layers {
            total += l.attention.matrices().into_iter().map(bytes).sum::<u64>();
            total += match l.ffn.moe() {
                Some(m) => {
                    let experts: u64 = m.experts.iter().flat_map(|e| e.matrices()).map(bytes).sum();
                    let n = m.experts.len().max(1) as u64;
                    let shared: u64 = m.shared.iter().flat_map(|e| e.matrices()).map(bytes).sum();
                    bytes(&m.router) + experts / n * m.top_k as u64 + shared
                }
                None => l.ffn.matrices().into_iter().map(bytes).sum(),
            };
        }
        total
    }

    fn add_linear(&mut self, lin: &Linear) {
        self.vectors += lin.bias.as_ref().map_or(0, |b| 4 * b.len() as u64);
        self.quantized_blocks += lin.quant.as_ref().map_or(0, |q| q.bytes());
        self.f32_prefill_copy += lin.packed.as_ref().map_or(0, |p| p.bytes());
        // A quantized matrix's f32 weights kept for candle's prefill GEMM (`--quantize` with
        // `--prefill-kernel dense|auto`); without quantized blocks the same storage is
        // candle's matrix, counted below.
        if let (Some(_), None, Some(d)) = (&lin.quant, &lin.weight, &lin.dense) {
            self.f32_prefill_copy += (d.elem_count() * d.dtype().size_in_bytes()) as u64;
        }
        self.candle_matrices += match &lin.weight {
            Some(QMatMul::QTensor(t)) => t.storage_size_in_bytes() as u64,
            Some(QMatMul::Tensor(t)) => (t.elem_count() * t.dtype().size_in_bytes()) as u64,
            Some(QMatMul::TensorF16(t)) => (t.elem_count() * t.dtype().size_in_bytes()) as u64,
            None => 0,
        };
    }
}
