//! CPU kernels of our own, where candle's are missing or too slow.
pub mod q8_1;
pub mod quant;
