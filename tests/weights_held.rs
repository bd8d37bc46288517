//! The weights' bytes `generate --show-stats` reports as held equal what the roofline counts
//! from the GGUF header alone (the estimator equals the runtime): the default model's
//! quantized blocks are the 96,436,224 bytes a decode step reads, its f32 prefill copy the
//! 537,919,488 bytes a prefill reads; nothing is held twice (no candle copy, no f32
//! embedding beside the tied LM head's blocks).
mod common;
use nanollm::roofline::model_weights;

#[test]
fn weights_held_equal_the_header_s_counts() {
    let m = common::model();
    let c = m.config();
    let held = m.decoder.weights_held();
    let counted = model_weights(&common::model_path(), c, true).expect("weights");
    assert_eq!(held.quantized_blocks, counted.decode.total());
    assert_eq!(held.quantized_blocks, 96_436_224);
    assert_eq!(held.f32_prefill_copy, counted.prefill.total());
    assert_eq!(held.f32_prefill_copy, 537_919_488);
    assert_eq!((held.candle_matrices, held.embedding_f32), (0, 0));
    let h = c.hidden_size as u64;
    assert_eq!(held.vectors, 4 * (2 * c.num_hidden_layers as u64 * h + h));

    let q = common::quantized_model().decoder.weights_held();
    assert_eq!(q.quantized_blocks, held.quantized_blocks);
    assert_eq!(q.f32_prefill_copy, 0);

    // The line of --show-stats, with the f32 copy (`--prefill-kernel dense`) and without it
    // (the default).
    let out = common::nanollm()
        .args([
            "generate",
            "-n",
            "2",
            "--show-stats",
            "--prefill-kernel",
            "dense",
            "Hi",
        ])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("weights held "))
        .unwrap_or_else(|| panic!("no weights line: {stderr}"));
    assert!(
        line.contains(
            "634,496,256 bytes (605.10 MiB): kernel blocks 91.97 MiB, f32 prefill copy 513.00 MiB"
        ),
        "{line}"
    );
    let out = common::nanollm()
        .args(["generate", "-n", "2", "--show-stats", "Hi"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("weights held          96,576,768 bytes (92.10 MiB): kernel blocks 91.97 MiB, norms and biases 137.25 KiB"),
        "{stderr}"
    );
}
