//! Typed access to the fields of a config.json object, with errors that name the field.
use anyhow::{anyhow, bail, Result};
use serde_json::Value;

/// Read access to the fields of a config.json object, with errors that name the field.
#[derive(Clone, Copy)]
pub(super) struct Fields<'a>(pub(super) &'a serde_json::Map<String, Value>);

impl<'a> Fields<'a> {
    /// The field, or `None` when absent or `null`.
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn has_any(&self, keys: &[&str]) -> bool {
        keys.iter().any(|k| self.get(k).is_some())
    }

    /// A non-negative integer field (`128` or `128.0`). Errors: any other JSON value.
    pub(super) fn uint(&self, key: &str) -> Result<Option<u64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let n = v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.007_199_254_740_992e15)
                .map(|f| f as u64)
        });
        match n {
            Some(n) => Ok(Some(n)),
            None => bail!("{key} is {}, expected a non-negative integer", show(v)),
        }
    }

    /// Like [`Fields::uint`], and at least 1.
    pub(super) fn positive(&self, key: &str) -> Result<Option<u64>> {
        match self.uint(key)? {
            Some(0) => bail!("{key} is 0, expected at least 1"),
            other => Ok(other),
        }
    }

    /// The first of `keys` present, with its name.
    pub(super) fn first_positive(
        &self,
        keys: &[&'static str],
    ) -> Result<Option<(&'static str, u64)>> {
        for key in keys {
            if let Some(n) = self.positive(key)? {
                return Ok(Some((key, n)));
            }
        }
        Ok(None)
    }

    pub(super) fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => bail!("{key} is {}, expected true or false", show(v)),
        }
    }

    pub(super) fn str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }
}

/// A JSON value for an error message, cut to 40 characters.
pub(super) fn show(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

/// `a · b`, or an error naming what overflowed.
pub(super) fn mul(what: &str, a: u64, b: u64) -> Result<u64> {
    a.checked_mul(b)
        .ok_or_else(|| anyhow!("{what} overflows 64 bits"))
}
