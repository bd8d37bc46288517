//! [`argmax`]: candle's argmax over a slice, without a tensor.

/// The index of the largest value, the first of equal ones; NaN values are never chosen
/// (index 0 when `logits[0]` is NaN): exactly what candle's CPU `argmax` returns (its loop
/// keeps index 0 and moves only to a strictly larger value), computed in two vectorizable
/// passes (the maximum, then its first position). None for an empty slice.
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let first = *logits.first()?;
    if first.is_nan() {
        return Some(0);
    }
    // Lane-wise maximum; `c > m` is false for NaN, so NaN never enters.
    let mut lanes = [first; 16];
    let mut chunks = logits.chunks_exact(16);
    for c in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            if v > *m {
                *m = v;
            }
        }
    }
    let mut max = first;
    for &v in lanes.iter().chain(chunks.remainder()) {
        if v > max {
            max = v;
        }
    }
    // The first value equal to the maximum (±0 compare equal, as in candle's `<`).
    let at = logits.iter().position(|&v| v == max)?;
    u32::try_from(at).ok()
}
