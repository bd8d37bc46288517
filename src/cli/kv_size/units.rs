//! Human sizes for the report: `32.00 GiB`, `34.36 GB`, `2 bytes per value`.
use crate::kv::KvDtype;

/// Binary human size: `32.00 GiB`, `90.00 MiB`, `512 B`.
pub(super) fn binary(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2} {}", UNITS[i])
}

/// Decimal human size: `34.36 GB`, `94.37 MB`, `512 B`.
fn decimal_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["kB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1000.0;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < UNITS.len() {
        v /= 1000.0;
        i += 1;
    }
    format!("{v:.2} {}", UNITS[i])
}

pub(super) fn size(bytes: u64) -> String {
    format!("{} ({})", binary(bytes), decimal_size(bytes))
}

pub(super) fn bytes_per_value(d: KvDtype) -> String {
    match d.block() {
        (1, 1) => "1 byte per value".into(),
        (b, 1) => format!("{b} bytes per value"),
        (b, n) => format!("{b} bytes per {n} values"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(binary(34_359_738_368), "32.00 GiB");
        assert_eq!(decimal_size(34_359_738_368), "34.36 GB");
        assert_eq!(binary(512), "512 B");
    }
}
