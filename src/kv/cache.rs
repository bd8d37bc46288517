//! [`KvCache`]: the per-request KV cache the engine owns and the decoder reads and extends.
//!
//! Contiguous layout: per layer one K and one V tensor of `[1, num_key_value_heads, capacity,
//! head_dim]` (f32). New tokens are written in place (`slice_set`) at the current length;
//! attention reads the `[1, H_kv, len, head_dim]` prefix as a view, with no copy. When a
//! request outgrows the capacity, the tensors are reallocated at twice the size.
use crate::kv::KvShape;
use candle_core::{DType, Device, Result, Tensor};

/// One layer's cache: K and V, `[1, num_key_value_heads, capacity, head_dim]`.
#[derive(Debug, Clone)]
struct LayerKv {
    k: Tensor,
    v: Tensor,
    len: usize,
}

/// The KV cache of one request: every layer's K and V for the tokens seen so far.
#[derive(Debug, Clone)]
pub struct KvCache {
    shape: KvShape,
    layers: Vec<Option<LayerKv>>,
    initial_capacity: usize,
    device: Device,
}

impl KvCache {
    /// An empty cache for a model of `shape` that will reserve room for `capacity` tokens
    /// (the prompt plus `max_new_tokens`, say) on first use; it grows past that if needed.
    pub fn new(shape: KvShape, capacity: usize, device: &Device) -> KvCache {
        KvCache {
            shape,
            layers: vec![None; shape.num_layers],
            initial_capacity: capacity.max(1),
            device: device.clone(),
        }
    }

    /// Tokens held (the length of layer 0's cache).
    pub fn len(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |l| l.len)
    }

    /// True when no token is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens each layer has room for without reallocating (0 before first use).
    pub fn capacity(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |l| l.k.dim(2).unwrap_or(0))
    }

    /// The cache's shape (layers, K/V heads, head_dim, dtype).
    pub fn shape(&self) -> KvShape {
        self.shape
    }

    /// Append `k` and `v` (`[1, num_key_value_heads, new_tokens, head_dim]`, f32) to layer
    /// `layer` and return views of everything it now holds, `[1, H_kv, len, head_dim]`.
    ///
    /// Errors: a layer index out of range or tensors of the wrong shape.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let new = k.dim(2)?;
        let (initial, device) = (self.initial_capacity, self.device.clone());
        let (h, d) = (self.shape.num_key_value_heads, self.shape.head_dim);
        let slot = self
            .layers
            .get_mut(layer)
            .ok_or_else(|| candle_core::Error::Msg(format!("KV cache has no layer {layer}")))?;
        let entry = match slot {
            Some(entry) => entry,
            None => {
                let cap = initial.max(new);
                let zeros = Tensor::zeros((1, h, cap, d), DType::F32, &device)?;
                slot.insert(LayerKv {
                    k: zeros.clone(),
                    v: zeros.copy()?,
                    len: 0,
                })
            }
        };
        let needed = entry.len + new;
        let cap = entry.k.dim(2)?;
        if needed > cap {
            let grown = needed.max(cap * 2);
            for t in [&mut entry.k, &mut entry.v] {
                let bigger = Tensor::zeros((1, h, grown, d), DType::F32, &device)?;
                bigger.slice_set(&t.narrow(2, 0, entry.len)?.contiguous()?, 2, 0)?;
                *t = bigger;
            }
        }
        entry.k.slice_set(&k.contiguous()?, 2, entry.len)?;
        entry.v.slice_set(&v.contiguous()?, 2, entry.len)?;
        entry.len = needed;
        Ok((entry.k.narrow(2, 0, needed)?, entry.v.narrow(2, 0, needed)?))
    }

    /// Bytes of K and V values held for the cached tokens, measured from the tensors:
    /// Σ over layers of elements(K[.., :len, ..]) + elements(V[.., :len, ..]) · dtype size.
    /// Equals `self.shape().bytes(self.len())`.
    pub fn bytes_used(&self) -> u64 {
        self.sum_bytes(|l| {
            let per_token = l.k.elem_count() / l.k.dim(2).unwrap_or(1).max(1);
            (per_token * l.len * l.k.dtype().size_in_bytes()) as u64 * 2
        })
    }

    /// Bytes allocated for K and V, measured from the tensors (capacity, not length).
    pub fn bytes_allocated(&self) -> u64 {
        self.sum_bytes(|l| {
            ((l.k.elem_count() * l.k.dtype().size_in_bytes())
                + (l.v.elem_count() * l.v.dtype().size_in_bytes())) as u64
        })
    }

    fn sum_bytes(&self, f: impl Fn(&LayerKv) -> u64) -> u64 {
        self.layers.iter().flatten().map(f).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::KvDtype;

    #[test]
    fn append_grows_and_measures_bytes() -> Result<()> {
        let shape = KvShape {
            num_layers: 2,
            num_key_value_heads: 3,
            head_dim: 4,
            dtype: KvDtype::F32,
        };
        let dev = Device::Cpu;
        let mut cache = KvCache::new(shape, 2, &dev);
        let k = Tensor::arange(0f32, 36., &dev)?.reshape((1, 3, 3, 4))?;
        for layer in 0..2 {
            let (kk, vv) = cache.append(layer, &k, &k)?;
            assert_eq!(kk.dims(), [1, 3, 3, 4]);
            assert_eq!(vv.dims(), [1, 3, 3, 4]);
        }
        let one = Tensor::ones((1, 3, 1, 4), DType::F32, &dev)?;
        for layer in 0..2 {
            let (kk, _) = cache.append(layer, &one, &one)?;
            // The old tokens survive the reallocation and the new one lands after them.
            let got: Vec<f32> = kk.narrow(2, 0, 3)?.flatten_all()?.to_vec1()?;
            let want: Vec<f32> = k.flatten_all()?.to_vec1()?;
            assert_eq!(got, want);
            let last: Vec<f32> = kk.narrow(2, 3, 1)?.flatten_all()?.to_vec1()?;
            assert_eq!(last, vec![1.0; 12]);
        }
        assert_eq!(cache.len(), 4);
        assert_eq!(cache.capacity(), 6);
        assert_eq!(cache.bytes_used(), shape.bytes(4).unwrap_or(0));
        assert_eq!(cache.bytes_used(), 2 * 2 * 3 * 4 * 4 * 4);
        assert_eq!(cache.bytes_allocated(), shape.bytes(6).unwrap_or(0));
        Ok(())
    }
}
