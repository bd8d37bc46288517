//! Causal GQA attention over the KV cache, on the CPU, one query row at a time.
//!
//! Each output row is computed by the same instructions in the same order whatever the
//! number of rows in the call: a decode step (one row) and a full recompute (every row)
//! produce bit-identical results for the same position. That is what makes naive and
//! KV-cached greedy decoding agree token for token, even through quantized matmuls that
//! round their inputs to 8 bits. Reference: "Attention Is All You Need" (softmax(QKᵀ/√d)V);
//! GQA per Ainslie et al. 2023 (query head h reads KV head h / (heads / kv_heads)).
use candle_core::{bail, Result, Storage, Tensor};
use rayon::prelude::*;

/// Width of the partial sums in [`dot`]; a multiple of the SIMD width.
const LANES: usize = 16;

/// `Σ a[i]·b[i]` with a fixed summation order (LANES partial sums, then a tree).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = a.len() / LANES;
    for c in 0..chunks {
        let (x, y) = (
            &a[c * LANES..(c + 1) * LANES],
            &b[c * LANES..(c + 1) * LANES],
        );
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0f32;
    for i in chunks * LANES..a.len() {
        tail += a[i] * b[i];
    }
    acc.iter().sum::<f32>() + tail
}

/// Run `f` on the f32 data of a CPU tensor, with its start offset and strides.
fn with_slice<R>(t: &Tensor, f: impl FnOnce(&[f32], usize, &[usize]) -> Result<R>) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(cpu) => f(
            cpu.as_slice::<f32>()?,
            layout.start_offset(),
            layout.stride(),
        ),
        _ => bail!("attention runs on the CPU only"),
    }
}

/// Which kernel runs one query row: AVX2 for the usual head_dims, else portable code.
#[derive(Debug, Clone, Copy)]
enum Simd {
    /// AVX2 + FMA, head_dim = 8 · chunks.
    #[cfg(target_arch = "x86_64")]
    Avx2 {
        chunks: usize,
    },
    Portable,
}

impl Simd {
    fn detect(head_dim: usize) -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            let chunks = head_dim / 8;
            if head_dim.is_multiple_of(8)
                && matches!(chunks, 4 | 8 | 12 | 16)
                && std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
            {
                return Simd::Avx2 { chunks };
            }
        }
        let _ = head_dim;
        Simd::Portable
    }
}

/// One query row: `out = softmax(q · Kᵀ) V` over the `len` key and value rows in `k`, `v`
/// (`[len, head_dim]` each). `scores` is scratch.
fn attend_row(
    simd: Simd,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    len: usize,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    use crate::kernels::attention_avx2 as x86;
    match simd {
        // SAFETY: Simd::detect chose Avx2 only when the CPU has AVX2 and FMA; len ≥ 1.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 { chunks: 4 } => unsafe { x86::attend_row::<4>(q, k, v, len, scores, out) },
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 { chunks: 8 } => unsafe { x86::attend_row::<8>(q, k, v, len, scores, out) },
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 { chunks: 12 } => unsafe { x86::attend_row::<12>(q, k, v, len, scores, out) },
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 { chunks: 16 } => unsafe { x86::attend_row::<16>(q, k, v, len, scores, out) },
        _ => attend_row_portable(q, k, v, len, scores, out),
    }
}

/// Portable version of [`attend_row`].
fn attend_row_portable(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    len: usize,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let d = q.len();
    scores.clear();
    scores.extend((0..len).map(|j| dot(q, &k[j * d..][..d])));
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    let inv = 1.0 / sum;
    out.fill(0.0);
    for (j, &p) in scores.iter().enumerate() {
        let w = p * inv;
        for (o, &x) in out.iter_mut().zip(&v[j * d..][..d]) {
            *o += w * x;
        }
    }
}

/// Causal attention for `n` new query rows at positions `start_pos .. start_pos + n`.
///
/// - `q`: `[1, heads, n, head_dim]` contiguous, already scaled by 1/√head_dim and rotated.
/// - `k`, `v`: `[1, kv_heads, t, head_dim]` views into the KV cache (t = start_pos + n),
///   rows contiguous (stride head_dim), heads at any stride.
///
/// Returns `[n, heads · head_dim]`. Errors: shapes that disagree, non-CPU tensors.
pub fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, start_pos: usize) -> Result<Tensor> {
    let (_, heads, n, d) = q.dims4()?;
    let out = causal_attention_rows(q, k, v, start_pos)?;
    Tensor::from_vec(out, (n, heads * d), q.device())
}

/// [`causal_attention`] returning the `[n, heads · head_dim]` result as a row-major `Vec`
/// (the decoder's layout, no tensor round trip). Errors: as [`causal_attention`].
pub fn causal_attention_rows(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    start_pos: usize,
) -> Result<Vec<f32>> {
    let (_, heads, n, d) = q.dims4()?;
    let (_, kv_heads, t, dk) = k.dims4()?;
    if dk != d || v.dims() != k.dims() || heads % kv_heads != 0 || t != start_pos + n {
        bail!(
            "attention shapes disagree: q {:?}, k {:?}, v {:?}",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    let q = q.contiguous()?;
    let groups = heads / kv_heads;
    let mut out = vec![0f32; n * heads * d];
    with_slice(&q, |qs, q_off, _| {
        with_slice(k, |ks, k_off, k_stride| {
            with_slice(v, |vs, v_off, v_stride| {
                if k_stride[3] != 1 || k_stride[2] != d || v_stride[3] != 1 || v_stride[2] != d {
                    bail!("attention needs K/V rows of contiguous head_dim values");
                }
                let simd = Simd::detect(d);
                out.par_chunks_mut(d)
                    .enumerate()
                    .for_each_init(Vec::new, |scores, (idx, o)| {
                        // out is [n, heads, d]: idx = row · heads + head.
                        let (row, head) = (idx / heads, idx % heads);
                        let kv = head / groups;
                        let qrow = &qs[q_off + (head * n + row) * d..][..d];
                        let len = start_pos + row + 1; // causal: keys 0 ..= position
                        let krows = &ks[k_off + kv * k_stride[1]..][..len * d];
                        let vrows = &vs[v_off + kv * v_stride[1]..][..len * d];
                        attend_row(simd, qrow, krows, vrows, len, scores, o);
                    });
                Ok(())
            })
        })
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, D};

    /// Against the textbook formula with candle ops (repeat K/V per head, mask, softmax).
    #[test]
    fn matches_softmax_qk_v_with_gqa_and_offset() -> Result<()> {
        let dev = Device::Cpu;
        let (heads, kv_heads, d, start, n) = (6, 2, 16, 3, 4);
        let t = start + n;
        let q = Tensor::randn(0f32, 1., (1, heads, n, d), &dev)?;
        let k = Tensor::randn(0f32, 1., (1, kv_heads, t, d), &dev)?;
        let v = Tensor::randn(0f32, 1., (1, kv_heads, t, d), &dev)?;
        let got = causal_attention(&q, &k, &v, start)?;
        let rep = |x: &Tensor| candle_transformers::utils::repeat_kv(x.clone(), heads / kv_heads);
        let scores = q.matmul(&rep(&k)?.t()?)?;
        let mask: Vec<f32> = (0..n)
            .flat_map(|i| (0..t).map(move |j| if j > start + i { f32::NEG_INFINITY } else { 0. }))
            .collect();
        let scores = scores.broadcast_add(&Tensor::from_vec(mask, (n, t), &dev)?)?;
        let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
        let want = probs
            .matmul(&rep(&v)?)?
            .squeeze(0)?
            .transpose(0, 1)?
            .reshape((n, heads * d))?;
        let diff = (got - want)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-5, "diff {diff}");
        Ok(())
    }

    /// One row alone gives the same bits as that row inside a larger call.
    #[test]
    fn a_row_does_not_depend_on_the_batch() -> Result<()> {
        let dev = Device::Cpu;
        let (heads, kv_heads, d, t) = (9, 3, 64, 40);
        let q = Tensor::randn(0f32, 1., (1, heads, t, d), &dev)?;
        let k = Tensor::randn(0f32, 1., (1, kv_heads, t, d), &dev)?;
        let v = Tensor::randn(0f32, 1., (1, kv_heads, t, d), &dev)?;
        let all = causal_attention(&q, &k, &v, 0)?;
        let last = causal_attention(&q.narrow(2, t - 1, 1)?, &k, &v, t - 1)?;
        let a: Vec<f32> = all.narrow(0, t - 1, 1)?.flatten_all()?.to_vec1()?;
        let b: Vec<f32> = last.flatten_all()?.to_vec1()?;
        assert_eq!(a, b);
        Ok(())
    }
}
