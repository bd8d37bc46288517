//! Oracle on the quantized kernels: see tests/oracle_quantized_llama.rs for the f32 check
//! and why the quantized comparison has a noise-level tolerance.
mod common;

#[test]
fn quantized_logits_match_candle_quantized_llama_within_noise() {
    let (d, cos, same_top) =
        common::quantized_logits_vs_candle(common::quantized_model(), nanollm::kv::KvDtype::F32);
    eprintln!("quantized: max |Δlogit| = {d}, cosine = {cos}");
    assert!(same_top, "the top-1 tokens differ");
    assert!(cos > 0.9995, "cosine similarity {cos}");
    // Measured 0.67 (2026-11-30, VNNI and AVX2 kernels alike: bit-identical). Each matrix's
    // 8-bit-activation cost is bounded directly in tests/oracle_kernels_per_matrix.rs.
    assert!(d < 1.0, "max |Δlogit| {d}");
}
