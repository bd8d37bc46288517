//! `kv-size`'s calculator: what a model's KV cache costs at a given context, apart from the
//! runtime cache. [`spec`] reads what each layer keeps (config.json, GGUF metadata, presets),
//! [`estimate`] turns it into bytes (dtypes, tensor parallelism, paged blocks, GPU fit), and
//! [`presets`] names published configs. The per-token arithmetic is shared with the runtime
//! cache through [`crate::kv::KvShape`], so estimate and allocation agree to the byte.
pub mod estimate;
pub mod presets;
pub mod spec;
