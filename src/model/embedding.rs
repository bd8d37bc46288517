//! [`Embedding`]: the token embedding `[vocab_size, hidden_size]`, one row looked up per
//! token. A GGUF embedding our kernels hold is kept in its quantized blocks and each looked-up
//! row dequantized on the spot (exactly as the f32 copy would hold it: `q · d + m`), and a
//! tied LM head's matrix serves as the embedding too, so the model keeps one copy of it
//! instead of a second one in f32 (113 MB for SmolLM2-135M, 671 MB for Gemma-3-270M).
use crate::kernels::matmul::QuantMatrix;
use crate::model::linear::Linear;
use anyhow::{bail, Result};
use candle_core::{Device, Tensor};

/// Where the embedding's rows live.
#[derive(Debug, Clone)]
pub enum Embedding {
    /// f32 rows (a Hugging Face folder; a GGUF type our kernels do not hold).
    Dense(Tensor),
    /// Our kernels' quantized rows (an untied GGUF embedding of a type they hold).
    Quantized(QuantMatrix),
    /// The rows of the LM head's quantized matrix (tied embeddings: one copy for both).
    TiedLmHead,
}

impl Embedding {
    /// The rows of `ids`, `[ids.len(), hidden_size]` row-major; `lm_head` is the model's
    /// (read for [`Embedding::TiedLmHead`]). Errors: an id past the vocabulary, or a tied
    /// embedding whose LM head has no quantized matrix.
    pub fn rows(&self, ids: &[u32], lm_head: &Linear, device: &Device) -> Result<Vec<f32>> {
        let matrix = match self {
            Embedding::Dense(t) => {
                let ids = Tensor::new(ids, device)?;
                return Ok(t.index_select(&ids, 0)?.flatten_all()?.to_vec1()?);
            }
            Embedding::Quantized(m) => m,
            Embedding::TiedLmHead => match &lm_head.quant {
                Some(m) => m,
                None => bail!("the tied embedding's LM head has no quantized matrix"),
            },
        };
        let (vocab, hidden) = matrix.dims();
        let mut out = vec![0f32; ids.len() * hidden];
        for (&id, row) in ids.iter().zip(out.chunks_exact_mut(hidden.max(1))) {
            if id as usize >= vocab {
                bail!("token id {id} is past the vocabulary of {vocab}");
            }
            matrix.dequantize_row(id as usize, row)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QMatMul;

    /// Rows looked up from the blocks equal the f32 copy's rows bit for bit, in any order and
    /// repeated; an id past the vocabulary is an error naming it.
    #[test]
    fn quantized_rows_equal_the_dense_rows() {
        let (vocab, hidden) = (11, 64);
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let mut bytes = Vec::new();
        for _ in 0..vocab * hidden / 32 {
            let d = half::f16::from_f32(0.01 + (s % 97) as f32 * 1e-4);
            bytes.extend(d.to_bits().to_le_bytes());
            for _ in 0..32 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                bytes.push((s >> 24) as u8);
            }
        }
        let m = QuantMatrix::from_ggml_q8_0_bytes(&bytes, vocab, hidden).expect("q8_0");
        let dense = m.dequantize();
        let t = Tensor::from_vec(dense.clone(), (vocab, hidden), &Device::Cpu).expect("tensor");
        let head = Linear {
            weight: Some(QMatMul::Tensor(t.clone())),
            bias: None,
            dense: None,
            quant: None,
            packed: None,
        };
        let ids = [3u32, 0, 10, 3];
        let want = Embedding::Dense(t)
            .rows(&ids, &head, &Device::Cpu)
            .expect("dense");
        let got = Embedding::Quantized(m)
            .rows(&ids, &head, &Device::Cpu)
            .expect("quantized");
        assert_eq!(got.len(), ids.len() * hidden);
        assert!(got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        let e = Embedding::Quantized(
            QuantMatrix::from_ggml_q8_0_bytes(&bytes, vocab, hidden).expect("q8_0"),
        )
        .rows(&[11], &head, &Device::Cpu)
        .expect_err("past the vocabulary");
        assert!(e.to_string().contains("token id 11"), "{e}");
        assert!(Embedding::TiedLmHead
            .rows(&[0], &head, &Device::Cpu)
            .is_err());
    }
}
