//! `kv-size`'s own values: the `--seq` list and dtype names (counts, sizes and parameter
//! counts are [`crate::units::parse`]'s).
use crate::kv::KvDtype;
use crate::units::parse_count;
use anyhow::{anyhow, bail, Result};

/// One `--seq` value: what was typed and the token count it means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SeqArg {
    pub(super) input: String,
    pub(super) tokens: u64,
}

/// A comma-separated list of `--seq` counts.
pub(super) fn parse_seq_list(s: &str) -> Result<Vec<SeqArg>> {
    s.split(',')
        .enumerate()
        .map(|(i, item)| {
            let item = item.trim();
            if item.is_empty() && s.contains(',') {
                bail!("--seq '{s}': value {} of the list is empty", i + 1);
            }
            Ok(SeqArg {
                input: item.to_string(),
                tokens: parse_count("--seq", item)?,
            })
        })
        .collect()
}

pub(super) fn parse_dtype(flag: &str, s: &str) -> Result<KvDtype> {
    KvDtype::parse(s).ok_or_else(|| {
        anyhow!("{flag} '{s}': unknown dtype (expected f32, f16, bf16, fp8, int8, q8_0, q4_0, iq4_nl, q4_0r or iq4_nlr)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_lists_split_on_commas() {
        assert_eq!(parse_seq_list("4k, 32k,128k").unwrap().len(), 3);
        assert!(parse_seq_list("131,072").is_err());
    }
}
