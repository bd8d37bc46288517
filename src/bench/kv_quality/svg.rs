//! The chart of `bench --kv-quality --plot FILE.svg`: KV bytes held per sequence on x; mean
//! KLD from the full f16 cache (top panel) and passkey retrieval (bottom panel) on y; one
//! point per configuration, coloured by its eviction policy (grey: a dtype alone), the
//! Pareto front ringed and joined.
use super::QualityRow;
use crate::bench::svg::{escape, nice_step, tick_label};
use std::fmt::Write;

const WIDTH: f64 = 900.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 60.0;
const PANEL: f64 = 250.0;
const GAP: f64 = 60.0;
const POLICIES: [(&str, &str); 7] = [
    ("streaming", "#0072b2"),
    ("snapkv", "#d55e00"),
    ("h2o", "#009e73"),
    ("tova", "#cc79a7"),
    ("knorm", "#e69f00"),
    ("random", "#56b4e9"),
    ("dtype alone", "#666666"),
];

fn color(label: &str) -> &'static str {
    POLICIES
        .iter()
        .find(|(p, _)| label.contains(&format!("+ {p}:")))
        .map_or(POLICIES[6].1, |(_, c)| c)
}

/// The chart as an SVG document; `subtitle` names the model and the text; `cases` is the
/// passkey set's size.
pub fn render(rows: &[QualityRow], cases: usize, subtitle: &str) -> String {
    let height = TOP + 2.0 * PANEL + GAP + 60.0;
    let w = WIDTH - LEFT - RIGHT;
    let x_top = rows.iter().map(|r| r.bytes_held).max().unwrap_or(1) as f64 * 1.05;
    let x_step = nice_step(x_top / 1_048_576.0, 6);
    let x_max = ((x_top / 1_048_576.0) / x_step).ceil() * x_step;
    let x = |b: u64| LEFT + (b as f64 / 1_048_576.0 / x_max).clamp(0.0, 1.0) * w;
    let k_top = rows.iter().map(|r| r.kld_mean).fold(1e-6, f64::max) * 1.1;
    let k_step = nice_step(k_top, 5);
    let k_max = (k_top / k_step).ceil() * k_step;
    let y_kld = |v: f64| TOP + PANEL - (v / k_max).clamp(0.0, 1.0) * PANEL;
    let top2 = TOP + PANEL + GAP;
    let y_acc = |hits: usize| top2 + PANEL - (hits as f64 / cases.max(1) as f64) * PANEL;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT}" y="24" font-size="16">KV memory against quality: dtypes and eviction policies</text>
<text x="{LEFT}" y="42" fill="#555">{}</text>
"##,
        escape(subtitle)
    );
    // Axes and grids.
    for (top, label) in [
        (TOP, "mean KLD from the full f16 cache (nats)"),
        (top2, "passkey retrieval (share of cases)"),
    ] {
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{top}" width="{w}" height="{PANEL}" fill="none" stroke="#999"/><text transform="translate(22 {:.1}) rotate(-90)" text-anchor="middle">{label}</text>"##,
            top + PANEL / 2.0
        );
        let mut v = 0.0;
        while v <= x_max + 1e-9 {
            let px = LEFT + v / x_max * w;
            let _ = writeln!(
                s,
                r##"<line x1="{px:.1}" x2="{px:.1}" y1="{top}" y2="{:.1}" stroke="#eee"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                top + PANEL,
                top + PANEL + 16.0,
                tick_label(v)
            );
            v += x_step;
        }
    }
    let mut v = 0.0;
    while v <= k_max + 1e-12 {
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT - 6.0,
            y_kld(v) + 4.0,
            tick_label(v)
        );
        v += k_step;
    }
    for i in 0..=4 {
        let share = i as f64 / 4.0;
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{}%</text>"##,
            LEFT - 6.0,
            top2 + PANEL - share * PANEL + 4.0,
            (share * 100.0).round()
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">KV bytes held per sequence (MiB)</text>"##,
        LEFT + w / 2.0,
        top2 + PANEL + 40.0
    );
    // The front, joined in order of bytes.
    let mut front: Vec<&QualityRow> = rows.iter().filter(|r| r.pareto).collect();
    front.sort_by_key(|r| r.bytes_held);
    for (pts, name) in [
        (
            front
                .iter()
                .map(|r| format!("{:.1},{:.1}", x(r.bytes_held), y_kld(r.kld_mean)))
                .collect::<Vec<_>>(),
            "kld",
        ),
        (
            front
                .iter()
                .map(|r| format!("{:.1},{:.1}", x(r.bytes_held), y_acc(r.passkey_hits)))
                .collect(),
            "acc",
        ),
    ] {
        let _ = writeln!(
            s,
            r##"<polyline class="front-{name}" points="{}" fill="none" stroke="#333" stroke-dasharray="5 3"/>"##,
            pts.join(" ")
        );
    }
    for r in rows {
        let c = color(&r.label);
        let title = escape(&format!(
            "{}: {} bytes, KLD {:.5}, PPL {:.3}, passkey {}/{cases}",
            r.label, r.bytes_held, r.kld_mean, r.ppl, r.passkey_hits
        ));
        for py in [y_kld(r.kld_mean), y_acc(r.passkey_hits)] {
            let _ = writeln!(
                s,
                r##"<circle cx="{:.1}" cy="{py:.1}" r="4" fill="{c}"><title>{title}</title></circle>"##,
                x(r.bytes_held)
            );
            if r.pareto {
                let _ = writeln!(
                    s,
                    r##"<circle cx="{:.1}" cy="{py:.1}" r="7" fill="none" stroke="#333"/>"##,
                    x(r.bytes_held)
                );
            }
        }
    }
    for (i, (name, c)) in POLICIES.iter().enumerate() {
        let y = TOP + 16.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r##"<circle cx="{:.1}" cy="{y:.1}" r="4" fill="{c}"/><text x="{:.1}" y="{:.1}">{name}</text>"##,
            LEFT + w + 20.0,
            LEFT + w + 30.0,
            y + 4.0
        );
    }
    let y = TOP + 16.0 + 18.0 * POLICIES.len() as f64;
    let _ = writeln!(
        s,
        r##"<circle cx="{:.1}" cy="{y:.1}" r="7" fill="none" stroke="#333"/><text x="{:.1}" y="{:.1}">Pareto front</text>"##,
        LEFT + w + 20.0,
        LEFT + w + 30.0,
        y + 4.0
    );
    s.push_str("</svg>\n");
    s
}
