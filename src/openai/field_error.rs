//! The error of one request field (OpenAI's error `param` and message), shared by the
//! body's parser and the typed field readers.
use std::fmt;

/// A field that is missing, of the wrong type or out of range: `param` is the field's name
/// (OpenAI's error `param`), `None` for the body as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field, e.g. `max_tokens` or `messages[0].content`.
    pub param: Option<String>,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    pub(super) fn new(param: &str, message: impl Into<String>) -> FieldError {
        FieldError {
            param: Some(param.to_string()),
            message: message.into(),
        }
    }

    /// An error about the body as a whole.
    pub fn body(message: impl Into<String>) -> FieldError {
        FieldError {
            param: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.param {
            Some(p) => write!(f, "{p}: {}", self.message),
            None => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for FieldError {}

pub(super) type Parsed<T> = Result<T, FieldError>;
