//! Models: configuration, weight loading (GGUF, Hugging Face safetensors folders and hub ids),
//! the Llama-family decoder (`decoder/`: layers made of blocks; `arch.rs`: which blocks each
//! architecture picks), the attention of query rows over the paged pool (`paged_attention/`),
//! tokenizer and chat template.
pub mod arch;
pub mod batch;
pub mod chat;
pub mod config;
pub mod decoder;
pub mod dirs;
pub mod embedding;
pub mod finite;
pub mod gguf;
pub mod hf;
pub mod linear;
pub mod loaded;
pub mod ops;
pub mod paged_attention;
pub mod quantize_at_load;
pub mod rope;
pub mod safetensors;
pub mod source;
pub mod tokenizer;

pub use batch::SeqChunk;
pub use config::{Architecture, ModelConfig};
pub use decoder::Decoder;
pub use dirs::default_model_path;
pub use loaded::Loaded;
pub use safetensors::WeightDtype;
pub use source::LoadOptions;
pub use tokenizer::{TextStream, Tokenizer};
