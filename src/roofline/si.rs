//! Numbers with a decimal SI prefix for the roofline's text (`96.44 MB`, `1.20 TFLOP/s`).

/// `96.44 MB`, `2.95 GB`: bytes with a decimal SI prefix (MB = 10^6, GB = 10^9 bytes).
pub fn bytes_text(bytes: f64) -> String {
    si(bytes, "B")
}

pub(crate) fn si(v: f64, unit: &str) -> String {
    let (div, prefix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(d, _)| v.abs() >= *d)
        .unwrap_or((1.0, ""));
    let x = v / div;
    let digits = if x.abs() >= 100.0 { 1 } else { 2 };
    format!("{x:.digits$} {prefix}{unit}")
}
