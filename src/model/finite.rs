//! Refusing a vector read from a model file (a norm weight, bias or sink) that holds NaN or
//! an infinity: one such value turns every logit after it into NaN, so the file is damaged.
use anyhow::{bail, Result};

/// `values` of tensor `name` in `source` (a file or folder, for the message) when every one
/// is a finite number. Errors: "SOURCE: NAME holds NaN, not a finite number: the file is
/// damaged".
pub fn finite(source: &str, name: &str, values: Vec<f32>) -> Result<Vec<f32>> {
    match values.iter().find(|v| !v.is_finite()) {
        Some(v) => bail!("{source}: {name} holds {v}, not a finite number: the file is damaged"),
        None => Ok(values),
    }
}
