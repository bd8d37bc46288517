//! CPU kernels of our own, where candle's are missing or too slow.
pub mod quant;
