//! The runtime KV cache the engine owns: the paged block pool ([`KvPool`]), each sequence's
//! [`BlockTable`], one sequence's [`KvCache`], the stored row formats ([`codec`]), and the
//! per-token shape ([`KvShape`]) that `kv-size`'s calculator ([`crate::sizing`]) shares, and
//! token eviction ([`evict`]): which rows a sequence keeps, packed so blocks go back.
pub mod block_table;
pub mod cache;
pub mod codec;
pub mod codec_q4;
pub mod evict;
pub mod groups;
pub mod layer_view;
pub mod offload;
pub mod part;
pub mod pool;
pub mod prefix_cache;
pub mod shape;

pub use block_table::BlockTable;
pub use cache::KvCache;
pub use groups::{KvGroup, KvGroups};
pub use layer_view::{LayerKv, RowCursor};
pub use part::KvPart;
pub use pool::{KvPool, DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE};
pub use prefix_cache::{BlockKey, KernelClass, ROOT_HASH};
pub use shape::{KvDtype, KvShape};
