//! Numbers as people read and type them, below everything that prints or parses a flag:
//! exact bytes with binary units (GiB = 2^30) and decimal ones (GB = 10^9), digits grouped
//! by thousands, `1 thread` / `2 threads`, and counts and sizes with suffixes (`128k`,
//! `80GiB`, `70.6B`). Imports nothing from the rest of the crate.
pub mod format;
pub mod parse;

pub use format::{
    binary_size, count_of, decimal_size, group_digits, human_bytes, num, scaled, short_number,
};
pub use parse::{parse_bytes, parse_count, parse_params, parse_tokens};
