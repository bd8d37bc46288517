//! Human sizes for the report: `32.00 GiB`, `34.36 GB`, `2 bytes per value`.
use crate::cli::units::scaled;
use crate::kv::KvDtype;

/// Binary human size: `32.00 GiB`, `90.00 MiB`, `512 B` ([`scaled`]: never `1024.00 MiB`).
pub(super) fn binary(bytes: u64) -> String {
    scaled(bytes, 1024, &["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"])
        .unwrap_or_else(|| format!("{bytes} B"))
}

/// Decimal human size: `34.36 GB`, `94.37 MB`, `512 B` (never `1000.00 MB`).
fn decimal_size(bytes: u64) -> String {
    scaled(bytes, 1000, &["kB", "MB", "GB", "TB", "PB", "EB"])
        .unwrap_or_else(|| format!("{bytes} B"))
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
        assert_eq!(binary(1_073_741_820), "1.00 GiB");
        assert_eq!(decimal_size(999_999_996), "1.00 GB");
    }
}
