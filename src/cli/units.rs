//! Numbers as people read them: exact bytes with binary units, digits grouped by thousands.

/// Size with exact bytes and binary units, e.g. `3,686,400 bytes (3.52 MiB)`.
pub fn human_bytes(bytes: u64) -> String {
    let units = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    let pretty = units
        .iter()
        .find(|(_, size)| bytes >= *size)
        .map(|(unit, size)| format!(" ({:.2} {unit})", bytes as f64 / *size as f64))
        .unwrap_or_default();
    format!("{} bytes{pretty}", group_digits(bytes))
}

/// `1234567` → `1,234,567`.
pub fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
