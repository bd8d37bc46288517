//! Typed readers of OpenAI request fields (integers as pydantic's lax integers in vLLM,
//! numbers, booleans, `seed` with llama.cpp's `-1`), each error naming the field, and the
//! random bits that seeds and response ids are drawn from.
use super::field_error::{FieldError, Parsed};
use serde_json::{Map, Value};

/// An optional non-negative integer field; a whole-number float such as `16.0` counts, as
/// pydantic's lax integers in vLLM.
pub(super) fn uint(o: &Map<String, Value>, key: &str) -> Parsed<Option<u64>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().or_else(|| whole(v)).map(Some).ok_or_else(|| {
            let too_large = v.as_f64().is_some_and(|f| f.fract() == 0.0 && f > 0.0);
            let what = if too_large {
                "too large: expected an integer of at most 2^53 (9,007,199,254,740,992)"
            } else {
                "expected a non-negative integer"
            };
            FieldError::new(key, format!("{what}, got {v}"))
        }),
    }
}

/// `v` as u64 when it is a float with no fractional part, in 0 ..= 2^53.
pub(super) fn whole(v: &Value) -> Option<u64> {
    let f = v.as_f64()?;
    (f.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(&f)).then_some(f as u64)
}

/// `seed`: an integer; `-1` means none (a seed is drawn when sampling, as llama.cpp's
/// `-1`), another negative seed is taken modulo 2^64 (vLLM accepts any integer).
pub(super) fn seed(o: &Map<String, Value>) -> Parsed<Option<u64>> {
    match o.get("seed") {
        Some(v) if v.as_f64() == Some(-1.0) => Ok(None),
        Some(v) if v.as_i64().is_some_and(|s| s < 0) => Ok(v.as_i64().map(|s| s as u64)),
        _ => uint(o, "seed"),
    }
}

/// An optional number field.
pub(super) fn num(o: &Map<String, Value>, key: &str) -> Parsed<Option<f64>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| FieldError::new(key, format!("expected a number, got {v}"))),
    }
}

/// An optional boolean field.
pub(super) fn boolean(o: &Map<String, Value>, key: &str) -> Parsed<Option<bool>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(FieldError::new(
            key,
            format!("expected true or false, got {v}"),
        )),
    }
}

/// A seed drawn from the OS's randomness ([`random_bits`]), for sampling requests that set
/// none: reported so the run can be repeated.
pub fn random_seed() -> u64 {
    // 32 bits, as llama.cpp's seeds: exact as a JSON number in every client (an i64 or a
    // JavaScript number), and short enough to type back as --seed.
    random_bits() & 0xFFFF_FFFF
}

/// 64 random bits: std's per-process random hash keys (a fresh key pair each call), mixed
/// with the clock. Not for cryptography; for seeds and response ids.
pub fn random_bits() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}
