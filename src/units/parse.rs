//! Numbers as people type them on a command line: token counts (`128k` = 131,072), memory
//! sizes (`80GiB`, `141GB`) and parameter counts (`70.6B`), read exactly (no float rounding)
//! into whole numbers. Each error is one line naming the flag and the value.
use super::format::group_digits;
use anyhow::{anyhow, bail, Result};

/// Split `digits[.digits]` into (mantissa, fraction digits); `None` if not that form.
fn decimal(s: &str) -> Option<(u128, u32)> {
    let s = s.replace('_', "");
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    // `5.` is no number; trailing zeros of a fraction say nothing (`1.50k` = `1.5k`).
    if s.contains('.') && frac.is_empty() {
        return None;
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > 18 {
        return None; // finer than any count or size: not a value we can read exactly
    }
    if int.len() > 30 {
        return Some((u128::MAX, 0)); // too long to be anything but an overflow
    }
    let mantissa: u128 = format!("{int}{frac}").parse().ok()?;
    Some((mantissa, frac.len() as u32))
}

/// `mantissa / 10^frac · unit` as an exact u64 (tokens, bytes and parameters are whole:
/// `1.5k` tokens = 1,536, `0.5B` bytes is refused). Errors: overflow, or a fraction that does
/// not come out whole.
fn scale(flag: &str, s: &str, (mantissa, frac): (u128, u32), unit: u128) -> Result<u64> {
    let num = mantissa.checked_mul(unit);
    let den = 10u128.pow(frac);
    let value = num.map(|n| (n / den, n % den));
    match value {
        Some((v, rem)) if v <= u64::MAX as u128 => {
            if rem != 0 {
                bail!("{flag} '{s}': not a whole number");
            }
            Ok(v as u64)
        }
        _ => bail!(
            "{flag} '{s}': too large, more than 2^64 − 1 = {}",
            group_digits(u64::MAX)
        ),
    }
}

/// A count: `4096`, `32k`, `128K`, `1m`, `1.5k` (k/K = 1,024, m/M = 1,048,576, `_` allowed
/// between digits). Errors: empty, negative, zero, a leading zero, garbage, or overflow.
pub fn parse_count(flag: &str, s: &str) -> Result<u64> {
    let t = s.trim();
    if t.is_empty() {
        bail!("{flag} is empty: expected a count like 4096, 32k or 1m");
    }
    if t.starts_with('-') {
        bail!("{flag} '{s}': must be at least 1, not negative");
    }
    let (num, unit) = match t.as_bytes()[t.len() - 1] {
        b'k' | b'K' => (&t[..t.len() - 1], 1u128 << 10),
        b'm' | b'M' => (&t[..t.len() - 1], 1u128 << 20),
        _ => (t, 1),
    };
    let parts = decimal(num).ok_or_else(|| {
        anyhow!("{flag} '{s}': not a count (expected e.g. 4096, 32k, 128K or 1m)")
    })?;
    if num.len() > 1 && num.starts_with('0') && !num.starts_with("0.") {
        bail!("{flag} '{s}': leading zero (commas separate values: write 131072, not 131,072)");
    }
    let n = scale(flag, s, parts, unit)?;
    if n == 0 {
        bail!("{flag} '{s}': must be at least 1");
    }
    Ok(n)
}

/// A token count for `flag` with [`parse_count`]'s grammar (`1k` = 1,024) as a `usize`. A
/// plain `0` passes through so that the caller names the rule it breaks (`--gen-len 0`).
/// Errors: [`parse_count`]'s, or a count past this machine's `usize`.
pub fn parse_tokens(flag: &str, s: &str) -> Result<usize> {
    if s.trim() == "0" {
        return Ok(0);
    }
    let n = parse_count(flag, s)?;
    usize::try_from(n).map_err(|_| anyhow!("{flag} '{s}': too large for this machine"))
}

/// A memory size: `80GiB`, `141GB`, `1.5TiB`, `512MiB`, or plain bytes. Units are
/// case-insensitive: B, KiB, MiB, GiB, TiB (2^10..2^40) and KB, MB, GB, TB (10^3..10^12).
/// Errors: a bare K/M/G/T (ambiguous), an unknown unit, garbage, or overflow.
pub fn parse_bytes(flag: &str, s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    let unit_value: u128 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "k" | "m" | "g" | "t" => bail!(
            "{flag} '{s}': '{unit}' is ambiguous: write {u}iB (2^{p}) or {u}B (10^{d})",
            u = unit.to_ascii_uppercase(),
            p = 10 * (1 + "kmgt".find(&unit.to_ascii_lowercase()).unwrap_or(0)),
            d = 3 * (1 + "kmgt".find(&unit.to_ascii_lowercase()).unwrap_or(0)),
        ),
        _ => bail!(
            "{flag} '{s}': unknown unit '{unit}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)"
        ),
    };
    if num.starts_with('-') {
        bail!("{flag} '{s}': a size cannot be negative");
    }
    let parts = decimal(num)
        .ok_or_else(|| anyhow!("{flag} '{s}': not a size (expected e.g. 80GiB or 141GB)"))?;
    // A byte count is whole: `0.5B` is no size (`1.5KiB` = 1,536 bytes is).
    scale(flag, s, parts, unit_value)
}

/// A parameter count: `8B`, `70.6B`, `135M`, `7000000000` (K/M/B/T = 10^3/10^6/10^9/10^12).
pub fn parse_params(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, unit) = match t.as_bytes().last().map(u8::to_ascii_lowercase) {
        Some(b'k') => (&t[..t.len() - 1], 1_000u128),
        Some(b'm') => (&t[..t.len() - 1], 1_000_000),
        Some(b'b') => (&t[..t.len() - 1], 1_000_000_000),
        Some(b't') => (&t[..t.len() - 1], 1_000_000_000_000),
        _ => (t, 1),
    };
    let parts = decimal(num)
        .ok_or_else(|| anyhow!("--params '{s}': not a count (expected e.g. 8B, 70.6B or 135M)"))?;
    match scale("--params", s, parts, unit)? {
        0 => bail!("--params '{s}': must be at least 1"),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_use_1024_for_k() {
        assert_eq!(parse_count("--seq", "128k").unwrap(), 131_072);
        assert_eq!(parse_count("--seq", "128K").unwrap(), 131_072);
        assert_eq!(parse_count("--seq", "1m").unwrap(), 1_048_576);
        assert_eq!(parse_count("--seq", "4096").unwrap(), 4096);
        assert_eq!(parse_count("--seq", "1.5k").unwrap(), 1536);
        assert_eq!(parse_count("--seq", "1.50k").unwrap(), 1536);
        assert_eq!(parse_count("--seq", "131_072").unwrap(), 131_072);
        for bad in [
            "12q",
            "5.k",
            "1.00000000000000000001k",
            "-5",
            "0",
            "",
            "k",
            "1.3k",
            "072",
            "99999999999999999999",
            "18014398509481984k",
        ] {
            assert!(parse_count("--seq", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_need_explicit_units() {
        assert_eq!(parse_bytes("--gpu-mem", "80GiB").unwrap(), 80 << 30);
        assert_eq!(parse_bytes("--gpu-mem", "141GB").unwrap(), 141_000_000_000);
        assert_eq!(parse_bytes("--gpu-mem", "1.5 GiB").unwrap(), 3 << 29);
        assert_eq!(parse_bytes("--gpu-mem", "1024").unwrap(), 1024);
        assert!(parse_bytes("--gpu-mem", "80G")
            .unwrap_err()
            .to_string()
            .contains("GiB"));
        assert!(parse_bytes("--gpu-mem", "80 parsecs").is_err());
        assert!(parse_bytes("--gpu-mem", "-1GiB").is_err());
        assert_eq!(parse_params("70.6B").unwrap(), 70_600_000_000);
        assert_eq!(parse_params("135M").unwrap(), 135_000_000);
    }
}
