//! Human sizes for the report: `32.00 GiB (34.36 GB)`, `2 bytes per value`.
use crate::kv::KvDtype;
use crate::units::{binary_size, decimal_size};

/// Binary and decimal human size: `32.00 GiB (34.36 GB)`.
pub(super) fn size(bytes: u64) -> String {
    format!("{} ({})", binary_size(bytes), decimal_size(bytes))
}

/// How many bytes hold how many values of `d`: `2 bytes per value`, `34 bytes per 32 values`.
pub(super) fn bytes_per_value(d: KvDtype) -> String {
    match d.block() {
        (1, 1) => "1 byte per value".into(),
        (b, 1) => format!("{b} bytes per value"),
        (b, n) => format!("{b} bytes per {n} values"),
    }
}
