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

/// A number as the user typed it, short: Rust's plain form (`0.7`, `2`), or scientific
/// notation (`1e-300`, `1.5e20`) when the plain form would run past a dozen digits.
pub fn short_number(x: f64) -> String {
    let plain = x.to_string();
    if plain.len() > 16 {
        format!("{x:e}")
    } else {
        plain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers_stay_short() {
        assert_eq!(short_number(0.7), "0.7");
        assert_eq!(short_number(2.0), "2");
        assert_eq!(short_number(0.001), "0.001");
        assert_eq!(short_number(1e-300), "1e-300");
        assert_eq!(short_number(1.5e20), "1.5e20");
        assert_eq!(short_number(f64::INFINITY), "inf");
    }
}
