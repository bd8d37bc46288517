//! The step-latency chart as a standalone SVG file (`nanollm bench --plot FILE.svg`):
//! decode step latency (ms) against position (tokens), one line per mode and prompt length.
//! Written by hand: a few dozen elements do not need a plotting crate.
use crate::bench::chart::{max_latency_ms, StepSeries};
use crate::bench::plan::BenchMode;
use std::fmt::Write;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 540.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 290.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 60.0;

/// Line colour of a mode (colour-blind-safe pair for the two engine modes).
fn color(mode: BenchMode) -> &'static str {
    match mode {
        BenchMode::Naive => "#d55e00",
        BenchMode::KvCache => "#0072b2",
        BenchMode::SwaFull => "#009e73",
        BenchMode::Spec => "#cc79a7",
    }
}

/// Dash pattern of the i-th prompt length, so overlapping position ranges stay apart.
fn dash(i: usize) -> &'static str {
    ["", "8 4", "2 3", "10 3 2 3"][i % 4]
}

/// A "nice" tick step (1, 2 or 5 × 10^k) giving about `ticks` intervals over `range`.
pub fn nice_step(range: f64, ticks: usize) -> f64 {
    if !range.is_finite() || range <= 0.0 {
        return 1.0;
    }
    let raw = range / ticks.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let unit = raw / mag;
    let nice = if unit <= 1.0 {
        1.0
    } else if unit <= 2.0 {
        2.0
    } else if unit <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// Escape text for XML content and attributes.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Format a tick value without trailing noise (`0.5`, `20`, `1500`).
pub fn tick_label(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The chart as an SVG document. `title` goes on top (escaped); `subtitle` below it.
pub fn render_svg(series: &[StepSeries], title: &str, subtitle: &str) -> String {
    let positions = series
        .iter()
        .flat_map(|s| &s.points)
        .map(|p| p.position as f64);
    let (x_min, x_max) = positions.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    let (x_min, x_max) = if x_min.is_finite() {
        (x_min, x_max.max(x_min + 1.0))
    } else {
        (0.0, 1.0)
    };
    let y_step = nice_step(max_latency_ms(series), 5);
    let y_max = (max_latency_ms(series) / y_step).ceil().max(1.0) * y_step;
    let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let sx = |x: f64| LEFT + (x - x_min) / (x_max - x_min) * pw;
    let sy = |y: f64| TOP + ph - y / y_max * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="42" fill="#555">{}</text>"##,
        escape(subtitle)
    );
    // Grid and y ticks.
    let mut y = 0.0;
    while y <= y_max + y_step * 1e-9 {
        let py = sy(y);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e5e5e5"/>"##,
            LEFT + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            py + 4.0,
            tick_label(y)
        );
        y += y_step;
    }
    // x ticks: whole positions only.
    let x_step = nice_step(x_max - x_min, 8).max(1.0);
    let mut x = (x_min / x_step).ceil() * x_step;
    while x <= x_max + x_step * 1e-9 {
        let px = sx(x);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#f0f0f0"/>"##,
            TOP + ph
        );
        let _ = writeln!(
            s,
            r#"<text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            TOP + ph + 18.0,
            tick_label(x)
        );
        x += x_step;
    }
    // Axes and their labels.
    let _ = writeln!(
        s,
        r##"<path d="M{LEFT} {TOP} V{:.1} H{:.1}" fill="none" stroke="#333"/>"##,
        TOP + ph,
        LEFT + pw
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">position in the sequence (tokens)</text>"#,
        LEFT + pw / 2.0,
        HEIGHT - 16.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(22 {:.1}) rotate(-90)" text-anchor="middle">decode step latency (ms)</text>"#,
        TOP + ph / 2.0
    );
    // Lines and legend.
    let mut lens: Vec<usize> = Vec::new();
    for (i, ser) in series.iter().enumerate() {
        if !lens.contains(&ser.prompt_len) {
            lens.push(ser.prompt_len);
        }
        let d = dash(lens.iter().position(|&l| l == ser.prompt_len).unwrap_or(0));
        let pts: Vec<String> = ser
            .points
            .iter()
            .map(|p| format!("{:.1},{:.1}", sx(p.position as f64), sy(p.latency_ms)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="1.6" stroke-dasharray="{d}"><title>{}</title></polyline>"#,
            pts.join(" "),
            color(ser.mode),
            escape(&format!(
                "{}, prompt {} tokens",
                ser.mode.name(),
                ser.prompt_len
            ))
        );
        // A one-step series (--gen-len 2) is a one-point polyline, which draws nothing.
        if let [p] = ser.points.as_slice() {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{}"/>"#,
                sx(p.position as f64),
                sy(p.latency_ms),
                color(ser.mode)
            );
        }
        let mean =
            ser.points.iter().map(|p| p.latency_ms).sum::<f64>() / ser.points.len().max(1) as f64;
        let (lx, ly) = (LEFT + pw + 20.0, TOP + 10.0 + 22.0 * i as f64);
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2" stroke-dasharray="{d}"/>"#,
            lx + 28.0,
            color(ser.mode)
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 34.0,
            ly + 4.0,
            escape(&format!(
                "{} · prompt {} (mean {:.1} ms)",
                ser.mode.name(),
                ser.prompt_len,
                mean
            ))
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::chart::StepPoint;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(100.0, 5), 20.0);
        assert_eq!(nice_step(7.0, 5), 2.0);
        assert_eq!(nice_step(0.0, 5), 1.0);
        assert_eq!(tick_label(0.5), "0.5");
        assert_eq!(tick_label(20.0), "20");
    }

    #[test]
    fn svg_has_one_line_per_series_and_escapes_text() {
        let ser = |mode, prompt_len, base: f64| StepSeries {
            mode,
            prompt_len,
            runs: 1,
            points: (0..5)
                .map(|i| StepPoint {
                    position: prompt_len + 1 + i,
                    latency_ms: base + i as f64,
                })
                .collect(),
        };
        let svg = render_svg(
            &[
                ser(BenchMode::Naive, 8, 10.0),
                ser(BenchMode::KvCache, 8, 1.0),
            ],
            "a < b & c",
            "sub",
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a &lt; b &amp; c"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        // No point marker while every series is a line.
        assert_eq!(svg.matches("<circle").count(), 0);
    }

    /// `--gen-len 2`: one decode step per series, drawn as a marker (a one-point polyline
    /// draws nothing), on an axis of whole positions (it ticked 17, 17.2, …).
    #[test]
    fn a_one_step_series_is_a_marker_on_whole_positions() {
        let one = |mode, latency_ms| StepSeries {
            mode,
            prompt_len: 16,
            runs: 1,
            points: vec![StepPoint {
                position: 17,
                latency_ms,
            }],
        };
        let svg = render_svg(
            &[one(BenchMode::Naive, 116.8), one(BenchMode::KvCache, 5.0)],
            "t",
            "s",
        );
        assert_eq!(svg.matches("<circle").count(), 2);
        let ticks: Vec<&str> = svg
            .lines()
            .filter(|l| {
                l.contains(r#"text-anchor="middle">"#)
                    && !l.contains("(ms)")
                    && !l.contains("position")
            })
            .filter_map(|l| l.split('>').nth(1)?.split('<').next())
            .collect();
        assert!(!ticks.is_empty());
        assert!(ticks.iter().all(|t| t.parse::<u64>().is_ok()), "{ticks:?}");
    }
}
