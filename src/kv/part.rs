//! [`KvPart`]: which half of a layer's cache, keys or values (shared by the pool and the
//! attention's view of one layer).

/// Which half of a layer's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvPart {
    /// Keys.
    K = 0,
    /// Values.
    V = 1,
}
