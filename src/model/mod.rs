//! Models: configuration, weight loading (GGUF), the Llama-family decoder, tokenizer and
//! chat template.
pub mod attention;
pub mod chat;
pub mod config;
pub mod gguf;
pub mod llama;
pub mod source;
pub mod tokenizer;

pub use config::{Architecture, ModelConfig};
pub use llama::Decoder;
pub use source::{default_model_path, Loaded};
pub use tokenizer::{TextStream, Tokenizer};
