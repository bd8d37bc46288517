use super::*;
use crate::roofline::counts::tests::{smollm2, tiny};
use crate::roofline::counts::WeightBytes;

fn limits() -> MachineLimits {
    MachineLimits {
        kernel: "avx2+fma",
        fma_lanes: 8,
        int8_kernel: "vpmaddubsw + vpmaddwd",
        threads: 2,
        f32_gflop_s_per_core: 100.0,
        f32_gflop_s: 200.0,
        int8_gop_s_per_core: 200.0,
        int8_gop_s: 400.0,
        read_gb_s_per_core: 12.0,
        read_gb_s: 20.0,
        buffer_bytes: 512 << 20,
        ridge_flop_per_byte: 10.0,
        measure_ms: 1000.0,
        working_set: None,
        other_processes_cpus: None,
        hypervisor_steal_cpus: None,
        core_to_core_round_trip_ns: None,
    }
}

fn weights(c: &ModelConfig) -> ModelWeights {
    ModelWeights {
        decode: WeightBytes {
            layers: 66_355_200,
            lm_head: 30_081_024,
        },
        prefill: WeightBytes::uniform(c, 4),
        separate_prefill_copy: true,
        prefill_from_blocks: false,
    }
}

#[test]
fn smollm2_line_by_hand() {
    let c = smollm2();
    let run = RunShape {
        prompt: 128,
        generated: 128,
        mode: DecodeMode::KvCache,
        kv_dtype: KvDtype::F16,
        mla_path: Default::default(),
    };
    let l = limits();
    let line = RooflineLine::new(&c, &weights(&c), run, 278.06367744, Some(10.0), Some(&l));
    // 27,806,367,744 FLOP in 0.27806367744 s = 100 GFLOP/s = 50% of 200.
    let p = line.prefill;
    assert!((p.gflop_s - 100.0).abs() < 1e-9);
    assert!((p.pct_of_f32_peak.unwrap_or(0.0) - 50.0).abs() < 1e-9);
    // bytes: 537,919,488 f32 weights + 128 · 23,040 K/V = 540,868,608.
    assert_eq!(p.bytes, 540_868_608.0);
    assert_eq!(p.bound, Some(Bound::Compute)); // 51.4 FLOP/byte ≥ ridge 10
                                               // Decode at the mean 192 keys: 96,436,224 + 192 · 23,040 = 100,859,904 bytes in 10 ms.
    let d = line.decode.expect("decode");
    assert_eq!(d.bytes, 100_859_904.0);
    assert!((d.gb_s - 10.0859904).abs() < 1e-9);
    assert!((d.pct_of_bandwidth.unwrap_or(0.0) - 50.429952).abs() < 1e-9);
    // FLOPs: 212,336,640 + 56,623,104 + 4 · 30 · 576 · 192 = 282,230,784.
    assert_eq!(d.flops, 282_230_784.0);
    assert_eq!(d.bound, Some(Bound::Memory));
    let text = line.decode_text(Some(&l)).unwrap_or_default();
    assert!(text.contains("100.9 MB, 282.2 MFLOP per token"), "{text}");
    assert!(
        text.contains("(50.4% of the 20.00 GB/s read bandwidth)"),
        "{text}"
    );
    assert!(text.ends_with("2.8 FLOP/byte: memory-bound"), "{text}");
    assert_eq!(
        line.prefill_text(None),
        "27.81 GFLOP, 540.9 MB in 278.1 ms = 100.0 GFLOP/s, 51.4 FLOP/byte"
    );
    assert!(line
        .prefill_text(Some(&l))
        .contains("(50.0% of the 200.0 GFLOP/s f32 peak), 51.4 FLOP/byte: compute-bound"));
    assert_eq!(p.pct_of_roof(), p.pct_of_f32_peak);
    assert_eq!(d.pct_of_roof(), d.pct_of_bandwidth);
    assert!(!text.contains("caches"), "{text}");
    assert!(!p.above_peak() && !d.above_peak() && !d.above_bandwidth());
    // The same prefill against a peak measured low, at about one core's worth (as on the
    // VM, 2026-12-03): 100.0 GFLOP/s is then above 100% of 99.0, which no kernel can do,
    // and the line says the peak was measured low.
    let low = MachineLimits {
        f32_gflop_s: 99.0,
        ..l
    };
    let line_low = RooflineLine::new(&c, &weights(&c), run, 278.06367744, Some(10.0), Some(&low));
    assert!(line_low.prefill.above_peak());
    let text_low = line_low.prefill_text(Some(&low));
    assert!(
        text_low.contains("(101.0% of the 99.0 GFLOP/s f32 peak; above 100% of the f32 peak: the peak was measured low, at a moment"),
        "{text_low}"
    );
    // Just under the peak (99.5%) is not above it.
    let at = MachineLimits {
        f32_gflop_s: 100.5,
        ..l
    };
    let line_at = RooflineLine::new(&c, &weights(&c), run, 278.06367744, Some(10.0), Some(&at));
    assert!(!line_at.prefill.above_peak());
    // The same decode in 4.0 ms: 25.2 GB/s, 126.1% of 20 GB/s, so some bytes came from
    // the caches, and the line says so.
    let fast = RooflineLine::new(&c, &weights(&c), run, 278.06367744, Some(4.0), Some(&l));
    let text = fast.decode_text(Some(&l)).unwrap_or_default();
    assert!(
        text.contains("(126.1% of the 20.00 GB/s read bandwidth; above 100%: some of the bytes came from the CPU's caches"),
        "{text}"
    );
    assert_eq!(fast.decode.map(|d| d.pct_of_working_set_read), Some(None));
    // With the read over a buffer of the decode weights measured at 40 GB/s: the same
    // 25.21 GB/s is 63.0% of it (25.2149760 / 40), and the line gives both.
    let cached = MachineLimits {
        working_set: Some(crate::roofline::peak::WorkingSetRead {
            bytes: 96_436_224,
            read_gb_s: 40.0,
        }),
        ..l
    };
    let fast = RooflineLine::new(
        &c,
        &weights(&c),
        run,
        278.06367744,
        Some(4.0),
        Some(&cached),
    );
    let d = fast.decode.expect("decode");
    assert!((d.pct_of_working_set_read.unwrap_or(0.0) - 63.037440).abs() < 1e-9);
    assert_eq!(d.pct_of_roof(), d.pct_of_bandwidth);
    let text = fast.decode_text(Some(&cached)).unwrap_or_default();
    assert!(
        text.contains("; 63.0% of the 40.00 GB/s read over 96.44 MB, the decode weights' size), 2.8 FLOP/byte: memory-bound"),
        "{text}"
    );
    // Prefill reads the f32 copy, not the decode weights: no share of that read.
    assert_eq!(fast.prefill.pct_of_working_set_read, None);
    let text = fast.prefill_text(Some(&cached));
    assert!(!text.contains("read over"), "{text}");
}

/// The tiny config's weights: 100 + 10 bytes quantized, 400 + 40 as the f32 copy.
fn tiny_weights(prefill_from_blocks: bool) -> ModelWeights {
    ModelWeights {
        decode: WeightBytes {
            layers: 100,
            lm_head: 10,
        },
        prefill: WeightBytes {
            layers: 400,
            lm_head: 40,
        },
        separate_prefill_copy: true,
        prefill_from_blocks,
    }
}

/// Where the dense prefill reads the GGUF blocks for a short prompt and for the LM
/// head's row, the bytes follow: prefill of 3 tokens (≤ 8) reads the blocks (100 + 10),
/// of 9 tokens the f32 layers and the blocks' LM head (400 + 10); a naive step after a
/// 3-token prompt reads only the decode matrices (110). K/V: 64 bytes per position.
#[test]
fn short_prompts_and_the_lm_head_row_read_the_blocks() {
    let c = tiny();
    let w = tiny_weights(true);
    let run = |prompt, mode| RunShape {
        prompt,
        generated: 3,
        mode,
        kv_dtype: KvDtype::F32,
        mla_path: Default::default(),
    };
    let short = RooflineLine::new(&c, &w, run(3, DecodeMode::Naive), 1.0, Some(1.0), None);
    assert_eq!(short.prefill.bytes, 110.0 + 3.0 * 64.0);
    // Naive steps of 4 and 5 positions: 110 + 256, 110 + 320; mean 398.
    assert_eq!(short.decode.expect("decode").bytes, 398.0);
    let long = RooflineLine::new(&c, &w, run(9, DecodeMode::KvCache), 1.0, None, None);
    assert_eq!(long.prefill.bytes, 410.0 + 9.0 * 64.0);
    let f32_only = ModelWeights {
        prefill_from_blocks: false,
        ..w
    };
    let long = RooflineLine::new(&c, &f32_only, run(9, DecodeMode::KvCache), 1.0, None, None);
    assert_eq!(long.prefill.bytes, 440.0 + 9.0 * 64.0);
}

#[test]
fn naive_steps_by_hand_on_the_tiny_config() {
    let c = tiny();
    let w = tiny_weights(false);
    let run = RunShape {
        prompt: 3,
        generated: 3,
        mode: DecodeMode::Naive,
        kv_dtype: KvDtype::F32,
        mla_path: Default::default(),
    };
    let line = RooflineLine::new(&c, &w, run, 1.0, Some(1.0), None);
    let d = line.decode.expect("decode");
    // Steps k = 1, 2: n = 4 and 5 positions. linear 2·n·2·576, attention
    // 4·2·8·n(n+1)/2, LM head 160: n = 4: 9,216 + 640 + 160 = 10,016;
    // n = 5: 11,520 + 960 + 160 = 12,640; mean 11,328.
    assert_eq!(d.flops, 11_328.0);
    // bytes: 400 + 110 weights + n · 64 K/V: 766 and 830, mean 798.
    assert_eq!(d.bytes, 798.0);
    assert_eq!(d.pct_of_f32_peak, None);
    assert_eq!(line.decode_text(None).map(|t| t.contains('%')), Some(false));
    // A naive step does a prefill's work: no share of the read over the decode weights'
    // size, even when it was measured (as KV-cached decode gets).
    let cached = MachineLimits {
        working_set: Some(crate::roofline::peak::WorkingSetRead {
            bytes: 110,
            read_gb_s: 40.0,
        }),
        ..limits()
    };
    let measured = RooflineLine::new(&c, &w, run, 1.0, Some(1.0), Some(&cached));
    assert_eq!(
        measured.decode.map(|d| d.pct_of_working_set_read),
        Some(None)
    );
    let kv = RooflineLine::new(
        &c,
        &w,
        RunShape {
            mode: DecodeMode::KvCache,
            ..run
        },
        1.0,
        Some(1.0),
        Some(&cached),
    );
    assert!(kv.decode.and_then(|d| d.pct_of_working_set_read).is_some());
    // One token: no decode step.
    let one = RooflineLine::new(
        &c,
        &w,
        RunShape {
            generated: 1,
            ..run
        },
        1.0,
        None,
        None,
    );
    assert_eq!(one.decode, None);
}

/// "Above 100%" is judged on the printed figure (one decimal), so a line never says
/// `100.0% of …; above 100%`.
#[test]
fn above_100_is_what_prints_above_100() {
    assert!(!above_100(Some(100.04)));
    assert!(above_100(Some(100.06)));
    assert!(!above_100(Some(99.0)));
    assert!(!above_100(None));
}
