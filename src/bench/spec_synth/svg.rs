//! The break-even chart of `bench --spec-synth-rates --plot FILE.svg`: decode speedup over
//! plain decoding against the per-position acceptance rate, one line per draft length k,
//! the break-even line (1×) dashed.
use super::{mean, SynthReport};
use crate::bench::svg::{escape, nice_step, tick_label};
use std::fmt::Write;

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 500.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 130.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 6] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9",
];

/// The chart as an SVG document; `subtitle` names the model and machine.
pub fn render(report: &SynthReport, subtitle: &str) -> String {
    let (w, h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let top = report
        .cells
        .iter()
        .map(|c| mean(&c.speedup))
        .fold(1.2_f64, f64::max)
        * 1.1;
    let step = nice_step(top, 6);
    let y_max = (top / step).ceil() * step;
    let x = |rate: f64| LEFT + rate.clamp(0.0, 1.0) * w;
    let y = |v: f64| TOP + h - (v / y_max).clamp(0.0, 1.0) * h;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT}" y="24" font-size="16">Speculative decoding: speedup against acceptance (synthetic drafts)</text>
<text x="{LEFT}" y="42" fill="#555">{}</text>
"##,
        escape(subtitle)
    );
    let mut v = 0.0;
    while v <= y_max + 1e-9 {
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{0}" y1="{1:.1}" y2="{1:.1}" stroke="#eee"/><text x="{2}" y="{3:.1}" text-anchor="end">{4}×</text>"##,
            LEFT + w,
            y(v),
            LEFT - 6.0,
            y(v) + 4.0,
            tick_label(v)
        );
        v += step;
    }
    for i in 0..=10 {
        let r = i as f64 / 10.0;
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"##,
            x(r),
            TOP + h + 18.0,
            tick_label(r)
        );
    }
    let (mid_x, label_y, mid_y, one, right) = (
        LEFT + w / 2.0,
        TOP + h + 40.0,
        TOP + h / 2.0,
        y(1.0),
        LEFT + w,
    );
    let _ = writeln!(
        s,
        r##"<text x="{mid_x:.1}" y="{label_y:.1}" text-anchor="middle">acceptance rate (a draft right when the ones before it were)</text>
<text transform="translate(18 {mid_y:.1}) rotate(-90)" text-anchor="middle">decode tokens/s ÷ plain decoding's</text>
<line x1="{LEFT}" x2="{right:.1}" y1="{one:.1}" y2="{one:.1}" stroke="#333" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" fill="#333">break-even</text>
<rect x="{LEFT}" y="{TOP}" width="{w}" height="{h}" fill="none" stroke="#999"/>"##,
        right + 6.0,
        one + 4.0,
    );
    let mut ks: Vec<usize> = report.cells.iter().map(|c| c.k).collect();
    ks.dedup();
    for (i, k) in ks.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = report
            .cells
            .iter()
            .filter(|c| c.k == *k)
            .map(|c| format!("{:.1},{:.1}", x(c.rate), y(mean(&c.speedup))))
            .collect();
        let _ = writeln!(
            s,
            r##"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"##,
            pts.join(" ")
        );
        for p in &pts {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(s, r##"<circle cx="{px}" cy="{py}" r="3" fill="{color}"/>"##);
        }
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" x2="{1:.1}" y1="{2:.1}" y2="{2:.1}" stroke="{color}" stroke-width="2"/><text x="{3:.1}" y="{4:.1}">k = {k}</text>"##,
            LEFT + w + 14.0,
            LEFT + w + 34.0,
            TOP + 20.0 + 18.0 * i as f64,
            LEFT + w + 40.0,
            TOP + 24.0 + 18.0 * i as f64
        );
    }
    s.push_str("</svg>\n");
    s
}
