//! Issue 58: DeepSeek (MLA and its mixture of experts) on tiny random models, against
//! candle-transformers' `deepseek2` and llama.cpp, and the cache invariants.
mod bad_input;
mod candle;
mod cli;
mod invariants;
mod llama_cpp;
mod serve;
pub mod tiny;
