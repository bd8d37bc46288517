//! Attention sinks (gpt-oss; Xiao et al. 2023, "Efficient Streaming Language Models with
//! Attention Sinks"): a learned logit per head that joins the softmax denominator as a key
//! with no value. Applied once per row and head, when its key ranges have been merged (R4),
//! so a row's bits do not depend on how its ranges were split.

/// How a head's merged attention is finished with its sink logit `sink`, from the merge's
/// running maximum `max` and numerator sum `sum`: `(scale, denominator)`, the output being
/// `acc · scale / denominator`. When the sink is above the maximum, the scores are rescaled
/// to it (`scale = e^(max − sink)`, denominator `sum · scale + 1`), else the sink adds
/// `e^(sink − max)` to the sum (scale 1); as ggml's `ggml_compute_forward_flash_attn_ext`
/// does. No sink: `(1, sum)`, the plain softmax bit for bit.
pub fn sink_scales(max: f32, sum: f32, sink: Option<f32>) -> (f32, f32) {
    match sink {
        None => (1.0, sum),
        Some(s) if s > max => {
            let c = (max - s).exp();
            (c, sum * c + 1.0)
        }
        Some(s) => (1.0, sum + (s - max).exp()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the softmax over the scores and the sink in f64: the sink's share leaves the
    /// values, whichever of the two is larger.
    #[test]
    fn the_sink_joins_the_denominator_as_a_key_without_value() {
        let scores = [0.5f64, -1.0, 2.0];
        for sink in [-3.0f64, 1.0, 2.0, 6.0] {
            let max = scores.iter().copied().fold(f64::MIN, f64::max);
            let sum: f64 = scores.iter().map(|s| (s - max).exp()).sum();
            let (scale, den) = sink_scales(max as f32, sum as f32, Some(sink as f32));
            let z: f64 = scores.iter().map(|s| s.exp()).sum::<f64>() + sink.exp();
            for s in scores {
                let want = s.exp() / z;
                let got = (s - max).exp() as f32 * scale / den;
                assert!(
                    (got as f64 - want).abs() < 1e-6,
                    "sink {sink}: {got} vs {want}"
                );
            }
        }
        assert_eq!(sink_scales(1.0, 3.0, None), (1.0, 3.0));
    }
}
