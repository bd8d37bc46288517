//! The roofline chart as SVG (part of `nanollm bench --plot`): achieved GFLOP/s against
//! arithmetic intensity (FLOP/byte), both axes logarithmic, under the measured roofs —
//! the read-bandwidth slope (GFLOP/s = GB/s · FLOP/byte) up to the f32 FMA peak, and the
//! int8 dot-product roof dashed above it — with one prefill point (circle) and one decode
//! point (square) per (mode, prompt length).
use crate::bench::plan::BenchMode;
use crate::bench::roofline::BenchRoofline;
use crate::bench::svg::escape;
use crate::roofline::line::bytes_text;
use std::fmt::Write;

/// Chart size (px): the same as the step-latency chart, so the two stack.
pub const WIDTH: f64 = 960.0;
/// Chart height (px).
pub const HEIGHT: f64 = 540.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 290.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 60.0;

fn color(mode: BenchMode) -> &'static str {
    match mode {
        BenchMode::Naive => "#d55e00",
        BenchMode::KvCache => "#0072b2",
        BenchMode::SwaFull => "#009e73",
        BenchMode::Spec => "#cc79a7",
    }
}

/// The decade at or below `v` (10^floor(log10 v)).
fn decade_below(v: f64) -> f64 {
    10f64.powf(v.log10().floor())
}

/// The decade at or above `v`.
fn decade_above(v: f64) -> f64 {
    10f64.powf(v.log10().ceil())
}

/// `0.1`, `1`, `10`, `1000`.
fn decade_label(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let digits = (-v.log10()).round() as usize;
        format!("{v:.digits$}")
    }
}

/// The chart as an SVG document; `subtitle` goes under the title (escaped).
pub fn render_roofline_svg(r: &BenchRoofline, subtitle: &str) -> String {
    let l = &r.limits;
    let (bw, peak, int8) = (l.read_gb_s, l.f32_gflop_s, l.int8_gop_s);
    let ridge = l.ridge_flop_per_byte;
    let ridge8 = int8 / bw;
    // (mode, prompt, prefill?, intensity, GFLOP/s, GB/s) of every plottable point.
    let mut points = Vec::new();
    for p in &r.points {
        let phases = [
            (true, Some(&p.line.prefill)),
            (false, p.line.decode.as_ref()),
        ];
        for (prefill, phase) in phases {
            if let Some(ph) = phase {
                let (x, y) = (ph.flop_per_byte, ph.gflop_s);
                if x.is_finite() && y.is_finite() && x > 0.0 && y > 0.0 {
                    points.push((p.mode, p.prompt_len, prefill, x, y, ph.gb_s));
                }
            }
        }
    }
    let xs = points.iter().map(|p| p.3).chain([ridge, ridge8]);
    let (x_lo, x_hi) = xs.fold((f64::INFINITY, 0f64), |(a, b), x| (a.min(x), b.max(x)));
    let valid = bw.is_finite() && peak.is_finite() && bw > 0.0 && peak > 0.0 && x_lo > 0.0;
    let (x_min, x_max) = if valid {
        (decade_below(x_lo / 2.0), decade_above(x_hi * 2.0))
    } else {
        (0.1, 1000.0)
    };
    // The read over the decode weights' size (the dotted roof), when measured.
    let cached = l
        .working_set
        .map(|w| (w.read_gb_s, w.bytes))
        .filter(|(cb, _)| cb.is_finite() && *cb > 0.0);
    let ys = points
        .iter()
        .map(|p| p.4)
        .chain([bw * x_min, peak, int8])
        .chain(cached.map(|(cb, _)| cb * x_min));
    let (y_lo, y_hi) = ys
        .filter(|y| y.is_finite() && *y > 0.0)
        .fold((f64::INFINITY, 0f64), |(a, b), y| (a.min(y), b.max(y)));
    let (y_min, y_max) = if y_lo.is_finite() && y_hi > 0.0 {
        (decade_below(y_lo), decade_above(y_hi * 1.5))
    } else {
        (0.1, 1000.0)
    };
    let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let sx = |x: f64| LEFT + (x / x_min).log10() / (x_max / x_min).log10() * pw;
    let sy = |y: f64| TOP + ph - (y / y_min).log10() / (y_max / y_min).log10() * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">Roofline: achieved GFLOP/s against arithmetic intensity</text>"#
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="42" fill="#555">{}</text>"##,
        escape(subtitle)
    );
    // Decade grid and labels.
    let mut x = x_min;
    while x <= x_max * 1.0001 {
        let px = sx(x);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#eee"/>"##,
            TOP + ph
        );
        let _ = writeln!(
            s,
            r#"<text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            TOP + ph + 18.0,
            decade_label(x)
        );
        x *= 10.0;
    }
    let mut y = y_min;
    while y <= y_max * 1.0001 {
        let py = sy(y);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#eee"/>"##,
            LEFT + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            py + 4.0,
            decade_label(y)
        );
        y *= 10.0;
    }
    let _ = writeln!(
        s,
        r##"<path d="M{LEFT} {TOP} V{:.1} H{:.1}" fill="none" stroke="#333"/>"##,
        TOP + ph,
        LEFT + pw
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">arithmetic intensity (FLOP/byte, log scale)</text>"#,
        LEFT + pw / 2.0,
        HEIGHT - 16.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(22 {:.1}) rotate(-90)" text-anchor="middle">achieved GFLOP/s (log scale)</text>"#,
        TOP + ph / 2.0
    );
    if valid {
        // The roofs: bandwidth slope to the ridge, then the f32 peak; the int8 roof dashed.
        let (x0, x1) = (x_min, x_max);
        let _ = writeln!(
            s,
            r##"<polyline points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="none" stroke="#222" stroke-width="2.2"/>"##,
            sx(x0),
            sy(bw * x0),
            sx(ridge),
            sy(peak),
            sx(x1),
            sy(peak)
        );
        let _ = writeln!(
            s,
            r##"<polyline points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="none" stroke="#777" stroke-width="1.4" stroke-dasharray="6 4"/>"##,
            sx(ridge),
            sy(peak),
            sx(ridge8),
            sy(int8),
            sx(x1),
            sy(int8)
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#222">f32 FMA peak {:.1} GFLOP/s</text>"##,
            LEFT + pw - 4.0,
            sy(peak) + 16.0,
            peak
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#777">int8 dot roof {:.1} GOP/s</text>"##,
            LEFT + pw - 4.0,
            sy(int8) - 6.0,
            int8
        );
        // The slope's angle on screen (negative: SVG's y grows downwards).
        let angle = ((sy(peak) - sy(bw * x0)) / (sx(ridge) - sx(x0)))
            .atan()
            .to_degrees();
        let (lx, ly) = (sx(x0 * 1.15), sy(bw * x0 * 1.15) - 6.0);
        let _ = writeln!(
            s,
            r##"<text transform="translate({lx:.1} {ly:.1}) rotate({angle:.1})" fill="#222" font-size="11">read bandwidth {:.2} GB/s</text>"##,
            bw
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" fill="#555" font-size="11">ridge {:.1} FLOP/byte</text>"##,
            sx(ridge) + 4.0,
            // A line below the peak's label, which it met when the ridge is far right.
            sy(peak) + 30.0,
            ridge
        );
        // The read over a buffer of the decode weights' size, dotted, up to the f32 peak:
        // where the caches hold the weights, decode meets this slope instead.
        if let Some((cb, bytes)) = cached {
            let top = (peak / cb).min(x1);
            let _ = writeln!(
                s,
                r##"<polyline points="{:.1},{:.1} {:.1},{:.1}" fill="none" stroke="#2a7" stroke-width="1.4" stroke-dasharray="2 3"/>"##,
                sx(x0),
                sy(cb * x0),
                sx(top),
                sy(cb * top)
            );
            // Along the dotted slope (parallel to the memory one on log-log axes), further
            // right than the memory label, so the two do not overlap when the reads are close.
            let at = (x0 * 4.0).min(top / 2.0).max(x0 * 1.15);
            let (lx, ly) = (sx(at), sy(cb * at) - 6.0);
            let _ = writeln!(
                s,
                r##"<text transform="translate({lx:.1} {ly:.1}) rotate({angle:.1})" fill="#2a7" font-size="11">read over {} (decode weights' size) {cb:.2} GB/s</text>"##,
                bytes_text(bytes as f64),
            );
        }
    }
    // The points and the legend: two lines per point while they fit the panel's height,
    // else one line each, closer together (16 points of 34 px ran off the bottom).
    let row = ((HEIGHT - TOP - 16.0) / points.len().max(1) as f64).min(34.0);
    let two_lines = row >= 30.0;
    // Where each point's "P=…" label went: a label that would cover an earlier one moves
    // down a line (decode points of several prompt lengths sit almost on top of each other).
    let mut placed: Vec<(f64, f64)> = Vec::new();
    for (i, &(mode, prompt, prefill, x, y, gb_s)) in points.iter().enumerate() {
        let (px, py) = (sx(x), sy(y));
        let phase = if prefill { "prefill" } else { "decode" };
        let title = escape(&format!(
            "{} {phase}, prompt {prompt}: {x:.2} FLOP/byte, {y:.1} GFLOP/s",
            mode.name()
        ));
        let shape = if prefill {
            format!(r#"<circle cx="{px:.1}" cy="{py:.1}" r="5""#)
        } else {
            format!(
                r#"<rect x="{:.1}" y="{:.1}" width="9" height="9""#,
                px - 4.5,
                py - 4.5
            )
        };
        let _ = writeln!(
            s,
            r##"{shape} fill="{}" stroke="white"><title>{title}</title></{}>"##,
            color(mode),
            if prefill { "circle" } else { "rect" }
        );
        let label = format!("P={prompt}");
        let (tx, ty) = free_label_spot(&placed, px + 8.0, py - 6.0, label_width(&label));
        placed.push((tx, ty));
        let _ = writeln!(
            s,
            r##"<text x="{tx:.1}" y="{ty:.1}" font-size="10" fill="{}">{}</text>"##,
            color(mode),
            escape(&label)
        );
        let (lx, ly) = (LEFT + pw + 20.0, TOP + 10.0 + row * i as f64);
        let marker = if prefill {
            format!(r#"<circle cx="{:.1}" cy="{ly:.1}" r="5""#, lx + 5.0)
        } else {
            format!(
                r#"<rect x="{lx:.1}" y="{:.1}" width="9" height="9""#,
                ly - 4.5
            )
        };
        let _ = writeln!(
            s,
            r##"{marker} fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"##,
            color(mode),
            lx + 16.0,
            ly + 4.0,
            escape(&format!("{} {phase}, prompt {prompt}", mode.name())),
        );
        if two_lines {
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" fill="#555" font-size="11">{}</text>"##,
                lx + 16.0,
                ly + 18.0,
                escape(&format!("{y:.1} GFLOP/s, {gb_s:.2} GB/s, {x:.1} FLOP/byte"))
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

/// Height of a point label's line, px (font size 10).
const LABEL_LINE: f64 = 11.0;

/// Width of `label` at font size 10, px (about 6 px per character: wide enough for digits).
fn label_width(label: &str) -> f64 {
    6.0 * label.chars().count() as f64
}

/// The first spot at `x`, from `y` down one label line at a time, where a label `width` px
/// wide covers none of the labels already `placed` (their left ends and baselines; labels of
/// up to `width` px).
fn free_label_spot(placed: &[(f64, f64)], x: f64, y: f64, width: f64) -> (f64, f64) {
    let mut y = y;
    while placed
        .iter()
        .any(|&(px, py)| (px - x).abs() < width && (py - y).abs() < LABEL_LINE)
    {
        y += LABEL_LINE;
    }
    (x, y)
}

/// Two SVG documents of [`WIDTH`] × [`HEIGHT`] stacked into one, `top` above `bottom`
/// (nested `<svg>` elements, the second moved down by [`HEIGHT`]).
pub fn stack(top: &str, bottom: &str) -> String {
    let h = 2.0 * HEIGHT;
    let moved = bottom.replacen("<svg ", &format!(r#"<svg y="{HEIGHT}" "#), 1);
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{h}\" viewBox=\"0 0 {WIDTH} {h}\">\n{top}{moved}</svg>\n"
    )
}

#[cfg(test)]
mod tests;
