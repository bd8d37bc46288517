use super::*;
use crate::bench::roofline::RooflinePoint;
use crate::roofline::line::{ABOVE_BANDWIDTH, ABOVE_PEAK};
use crate::roofline::{MachineLimits, ModelWeights, Phase, RooflineLine, WeightBytes};

fn roofline() -> BenchRoofline {
    let limits = MachineLimits {
        kernel: "avx2+fma",
        fma_lanes: 8,
        int8_kernel: "vpmaddubsw + vpmaddwd",
        threads: 2,
        f32_gflop_s_per_core: 92.0,
        f32_gflop_s: 184.0,
        int8_gop_s_per_core: 200.0,
        int8_gop_s: 400.0,
        read_gb_s_per_core: 12.0,
        read_gb_s: 19.3,
        buffer_bytes: 512 << 20,
        ridge_flop_per_byte: 184.0 / 19.3,
        measure_ms: 1000.0,
        working_set: None,
        other_processes_cpus: None,
        hypervisor_steal_cpus: None,
        core_to_core_round_trip_ns: None,
    };
    let point = |mode, prefill: Phase, decode: Phase| RooflinePoint {
        mode,
        prompt_len: 128,
        generated: 128,
        prefill_ms: prefill.ms,
        tpot_ms: decode.ms,
        line: RooflineLine {
            prefill,
            decode: Some(decode),
        },
    };
    let pre = Phase::new(27.8e9, 540e6, 323.0, Some(&limits));
    BenchRoofline {
        limits,
        measurements: vec![limits],
        weights: ModelWeights {
            decode: WeightBytes::default(),
            prefill: WeightBytes::default(),
            separate_prefill_copy: false,
            prefill_from_blocks: false,
        },
        points: vec![
            point(
                BenchMode::Naive,
                pre,
                Phase::new(40e9, 600e6, 400.0, Some(&limits)),
            ),
            point(
                BenchMode::KvCache,
                pre,
                Phase::new(282e6, 100e6, 9.7, Some(&limits)),
            ),
        ],
    }
}

#[test]
fn the_chart_has_the_roofs_and_one_mark_per_phase() {
    let svg = render_roofline_svg(&roofline(), "a < b");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // Two roofs (f32 and int8), two prefill circles and two decode squares (+ legend).
    assert_eq!(svg.matches("<polyline").count(), 2);
    assert_eq!(svg.matches("<circle").count(), 4);
    assert_eq!(svg.matches("<rect x=").count(), 4);
    assert!(svg.contains("f32 FMA peak 184.0 GFLOP/s"));
    assert!(svg.contains("read bandwidth 19.30 GB/s"));
    assert!(svg.contains("a &lt; b"));
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
    let both = stack("<svg a></svg>\n", &svg);
    assert_eq!(both.matches("<svg").count(), 3);
    assert!(both.contains(r#"<svg y="540" xmlns"#));
    // With the read over the decode weights' size measured: a third, dotted roof.
    let mut r = roofline();
    r.limits.working_set = Some(crate::roofline::peak::WorkingSetRead {
        bytes: 96_436_224,
        read_gb_s: 38.5,
    });
    let svg = render_roofline_svg(&r, "");
    assert_eq!(svg.matches("<polyline").count(), 3);
    assert!(svg.contains("read over 96.44 MB (decode weights' size) 38.50 GB/s"));
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
    // A cached read far below the memory one (a busy moment) still lies inside the plot.
    for slow in [0.5, 1e-3] {
        r.limits.working_set = Some(crate::roofline::peak::WorkingSetRead {
            bytes: 96_436_224,
            read_gb_s: slow,
        });
        let svg = render_roofline_svg(&r, "");
        let line = svg
            .lines()
            .find(|l| l.contains("#2a7") && l.starts_with("<polyline"))
            .expect("dotted roof");
        let points = line.split('"').nth(1).expect("points");
        for xy in points.split(' ') {
            let y: f64 = xy
                .split(',')
                .nth(1)
                .and_then(|v| v.parse().ok())
                .expect("y");
            assert!((TOP - 0.1..=HEIGHT - BOTTOM + 0.1).contains(&y), "{line}");
        }
    }
}

#[test]
fn decades_and_labels() {
    assert_eq!(decade_below(27.0), 10.0);
    assert_eq!(decade_above(27.0), 100.0);
    assert_eq!(decade_label(0.1), "0.1");
    assert_eq!(decade_label(1000.0), "1000");
}

/// 16 points (4 prompt lengths × 2 modes × 2 phases): every legend line stays inside the
/// panel (at 34 px a row, the last ones ran off its bottom and were clipped); the ridge's
/// label sits a line below the f32 peak's (they collided when the ridge is far right).
#[test]
fn a_long_legend_stays_inside_the_panel() {
    let mut r = roofline();
    let first = r.points.clone();
    for _ in 0..3 {
        r.points.extend(first.iter().cloned());
    }
    let svg = render_roofline_svg(&r, "");
    let ys: Vec<f64> = svg
        .lines()
        .filter(|l| l.contains("prompt 128</text>"))
        .filter_map(|l| {
            l.split("<text ")
                .nth(1)?
                .split("y=\"")
                .nth(1)?
                .split('"')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(ys.len(), 16, "{svg}");
    assert!(ys.iter().all(|&y| y < HEIGHT - 4.0), "{ys:?}");
    let y_of = |needle: &str| -> f64 {
        let l = svg.lines().find(|l| l.contains(needle)).expect(needle);
        l.split("y=\"")
            .nth(1)
            .and_then(|v| v.split('"').next())
            .and_then(|v| v.parse().ok())
            .expect("y")
    };
    assert!(y_of("ridge ") - y_of("f32 FMA peak") >= 12.0);
}

/// Points on top of each other (decode at several prompt lengths lands at nearly the same
/// intensity and rate): their "P=…" labels go one under the other instead of overprinting.
#[test]
fn point_labels_do_not_overlap() {
    let mut r = roofline();
    let mut more = r.points[1].clone();
    more.prompt_len = 512;
    r.points.push(more.clone());
    more.prompt_len = 2048;
    r.points.push(more);
    let svg = render_roofline_svg(&r, "");
    // (x, y) of every "P=…" label `label`.
    let spots = |label: &str| -> Vec<(f64, f64)> {
        svg.lines()
            .filter(|l| l.contains(&format!(">{label}</text>")))
            .filter_map(|l| {
                let attr = |key: &str| -> Option<f64> {
                    l.split(key).nth(1)?.split('"').next()?.parse().ok()
                };
                Some((attr(" x=\"")?, attr(" y=\"")?))
            })
            .collect()
    };
    let labels: Vec<(f64, f64)> = ["P=512", "P=2048"]
        .iter()
        .map(|l| *spots(l).first().expect(l))
        .collect();
    // No P=128 label (two modes, two phases) sits where the later ones are.
    let ys_128 = spots("P=128");
    assert_eq!(ys_128.len(), 4, "{svg}");
    for (x, y) in &labels {
        assert!(
            ys_128
                .iter()
                .all(|(x0, y0)| (x - x0).abs() >= 24.0 || (y - y0).abs() >= LABEL_LINE),
            "{labels:?} {ys_128:?}"
        );
    }
    let (a, b) = (labels[0], labels[1]);
    assert_eq!(a.0, b.0);
    assert!((b.1 - a.1).abs() >= LABEL_LINE, "{labels:?}");
    assert_eq!(
        free_label_spot(&[(10.0, 20.0)], 10.0, 20.0, 30.0),
        (10.0, 31.0)
    );
    assert_eq!(
        free_label_spot(&[(10.0, 20.0)], 50.0, 20.0, 30.0),
        (50.0, 20.0)
    );
}

/// Under the table, each kind of "above 100%" is explained once, and only when a phase is
/// above its roof: a decode above the read bandwidth (caches) and a prefill above the f32
/// peak (measured low).
#[test]
fn the_text_explains_phases_above_their_roof() {
    let r = roofline();
    let text = r.render_text();
    assert!(
        !text.contains(ABOVE_BANDWIDTH) && !text.contains(ABOVE_PEAK),
        "{text}"
    );
    // The same runs against limits measured low: 86 GFLOP/s of prefill over a 50 GFLOP/s
    // peak, 10.3 GB/s of decode over 5 GB/s.
    let low = MachineLimits {
        f32_gflop_s: 50.0,
        read_gb_s: 5.0,
        ridge_flop_per_byte: 10.0,
        ..r.limits
    };
    let mut r2 = r.clone();
    r2.limits = low;
    for p in &mut r2.points {
        let (pre, dec) = (p.line.prefill, p.line.decode.expect("decode"));
        p.line.prefill = Phase::new(pre.flops, pre.bytes, pre.ms, Some(&low));
        p.line.decode = Some(Phase::new(dec.flops, dec.bytes, dec.ms, Some(&low)));
    }
    let text = r2.render_text();
    assert_eq!(text.matches(ABOVE_BANDWIDTH).count(), 1, "{text}");
    assert_eq!(text.matches(ABOVE_PEAK).count(), 1, "{text}");
    assert!(text.find(ABOVE_BANDWIDTH) < text.find(ABOVE_PEAK), "{text}");
}
