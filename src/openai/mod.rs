//! The OpenAI API's request bodies and error objects, shared by `nanollm serve`
//! (`/v1/completions`, `/v1/chat/completions`) and `nanollm run-batch` (one body per JSONL
//! line). Field names and defaults follow OpenAI's API reference and vLLM's server.
pub mod body;
pub mod error;
pub mod field_error;
pub mod fields;
pub mod unsupported;

pub use body::{parse_body, Body, FieldError, PromptInput};
pub use error::ApiError;
