//! Models: configuration, weight loading (GGUF, Hugging Face safetensors folders and hub ids),
//! the Llama-family decoder, tokenizer and chat template.
pub mod attention;
pub mod batch;
pub mod chat;
pub mod config;
pub mod embedding;
pub mod gguf;
pub mod hf;
pub mod in_situ;
pub mod linear;
pub mod llama;
pub mod ops;
pub mod rope;
pub mod safetensors;
pub mod source;
pub mod tokenizer;
pub mod weights_held;

pub use batch::SeqChunk;
pub use config::{Architecture, ModelConfig};
pub use llama::Decoder;
pub use safetensors::WeightDtype;
pub use source::{default_model_path, LoadOptions, Loaded};
pub use tokenizer::{TextStream, Tokenizer};
