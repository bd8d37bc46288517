//! The KV cache: its shape ([`KvShape`]), the runtime cache the engine owns ([`KvCache`]),
//! and the `kv-size` arithmetic ([`estimate`]).
pub mod cache;
pub mod estimate;
pub mod presets;
pub mod shape;
pub mod spec;

pub use cache::KvCache;
pub use shape::{KvDtype, KvShape};
