//! Numbers as people read them: exact bytes with binary units, digits grouped by thousands.

/// Size with exact bytes and binary units, e.g. `3,686,400 bytes (3.52 MiB)`.
pub fn human_bytes(bytes: u64) -> String {
    let pretty = scaled(bytes, 1024, &["KiB", "MiB", "GiB"])
        .map(|s| format!(" ({s})"))
        .unwrap_or_default();
    format!("{} bytes{pretty}", group_digits(bytes))
}

/// `bytes` in the largest of `units` (each `base` times the one before, the first `base`
/// bytes) whose value, shown with two decimals, is at least 1 — and below `base`, so that
/// 1,073,741,820 bytes is `1.00 GiB`, not `1024.00 MiB`; the last unit takes any value.
/// None below `base` bytes.
pub fn scaled(bytes: u64, base: u64, units: &[&str]) -> Option<String> {
    if bytes < base || units.is_empty() {
        return None;
    }
    let base = base as f64;
    let mut v = bytes as f64 / base;
    let mut i = 0;
    // Move up while the value would print as `base.00` or more.
    while (v * 100.0).round() >= base * 100.0 && i + 1 < units.len() {
        v /= base;
        i += 1;
    }
    Some(format!("{v:.2} {}", units[i]))
}

/// `1 thread`, `2 threads`: a count and its noun, singular for one.
pub fn count_of(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `n` with its digits grouped by thousands: `34,359,738,368`.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Binary human size: `32.00 GiB`, `90.00 MiB`, `512 B` ([`scaled`]: never `1024.00 MiB`).
pub fn binary_size(bytes: u64) -> String {
    scaled(bytes, 1024, &["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"])
        .unwrap_or_else(|| format!("{bytes} B"))
}

/// Decimal human size: `34.36 GB`, `94.37 MB`, `512 B` (never `1000.00 MB`).
pub fn decimal_size(bytes: u64) -> String {
    scaled(bytes, 1000, &["kB", "MB", "GB", "TB", "PB", "EB"])
        .unwrap_or_else(|| format!("{bytes} B"))
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

/// A number with precision to suit its size: `12,345`, `123.4`, `12.34`.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v.abs() >= 1000.0 {
        let digits = format!("{:.0}", v.abs());
        let mut out = String::from(if v < 0.0 { "-" } else { "" });
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular() {
        assert_eq!(count_of(1, "thread"), "1 thread");
        assert_eq!(count_of(0, "thread"), "0 threads");
        assert_eq!(count_of(2, "thread"), "2 threads");
    }

    /// A value that rounds to the base moves to the next unit (found by a bug hunt:
    /// `1024.00 MiB`, `1000.00 MB`); exact powers and the last unit stay as they were.
    #[test]
    fn sizes_round_into_the_next_unit() {
        let bin = ["KiB", "MiB", "GiB"];
        assert_eq!(
            scaled(1_073_741_820, 1024, &bin).as_deref(),
            Some("1.00 GiB")
        );
        assert_eq!(scaled(1_048_575, 1024, &bin).as_deref(), Some("1.00 MiB"));
        assert_eq!(
            scaled(1_048_000, 1024, &bin).as_deref(),
            Some("1023.44 KiB")
        );
        assert_eq!(scaled(3_686_400, 1024, &bin).as_deref(), Some("3.52 MiB"));
        assert_eq!(scaled(1023, 1024, &bin), None);
        assert_eq!(
            scaled(1 << 50, 1024, &bin).as_deref(),
            Some("1048576.00 GiB")
        );
        assert_eq!(
            scaled(999_999_996, 1000, &["kB", "MB", "GB"]).as_deref(),
            Some("1.00 GB")
        );
        assert_eq!(human_bytes(1_048_575), "1,048,575 bytes (1.00 MiB)");
    }

    #[test]
    fn digits_group_by_thousands() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(34_359_738_368), "34,359,738,368");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(binary_size(34_359_738_368), "32.00 GiB");
        assert_eq!(decimal_size(34_359_738_368), "34.36 GB");
        assert_eq!(binary_size(512), "512 B");
        assert_eq!(binary_size(1_073_741_820), "1.00 GiB");
        assert_eq!(decimal_size(999_999_996), "1.00 GB");
    }

    #[test]
    fn numbers_keep_useful_digits() {
        assert_eq!(num(65432.4), "65,432");
        assert_eq!(num(123.45), "123.5");
        assert_eq!(num(1.234), "1.23");
    }

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
