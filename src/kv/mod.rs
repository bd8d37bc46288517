//! The runtime KV cache the engine owns ([`KvCache`]) and its per-token shape ([`KvShape`]),
//! which `kv-size`'s calculator ([`crate::sizing`]) shares.
pub mod cache;
pub mod shape;

pub use cache::KvCache;
pub use shape::{KvDtype, KvShape};
