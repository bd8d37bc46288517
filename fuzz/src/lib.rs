//! The fuzz targets' shared code: one function per target in [`harness`], also compiled into
//! the main crate's `tests/fuzz_parsers.rs` (proptest) so both run the same code.
pub mod harness;
pub use harness::*;
