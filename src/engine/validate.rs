//! Request validation, done once: [`check`] refuses what a request cannot run with a typed
//! [`RequestError`], which `serve`, `run-batch` and `generate` each turn into their own output
//! (an HTTP error with its parameter, a `--input line` error, a flag's error); its
//! `Display` is the batched engine's own wording
//! ([`LlmEngine::add_request`](crate::engine::llm_engine::LlmEngine::add_request)).
use crate::engine::Request;

/// Why a request was refused before it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// No prompt token.
    EmptyPrompt,
    /// `max_new_tokens` of 0.
    ZeroMaxTokens,
    /// The prompt leaves no room for a generated token.
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Most tokens a sequence may hold (`--max-model-len`, or the context window).
        max_len: usize,
    },
    /// A `max_tokens` the client set that does not fit after the prompt (checked only when
    /// [`Limits::refuse_past_max_len`] says so; otherwise the engine caps it).
    TooManyTokens {
        /// Prompt tokens.
        prompt: usize,
        /// The tokens asked for.
        max_new_tokens: usize,
        /// Most tokens a sequence may hold.
        max_len: usize,
    },
    /// A prompt token id the model does not have.
    PromptTokenOutOfVocab {
        /// The first such id.
        token: u32,
        /// The model's vocabulary size.
        vocab: usize,
    },
    /// A stop token id the model cannot produce.
    StopTokenOutOfVocab {
        /// The first such id.
        token: u32,
        /// The model's vocabulary size.
        vocab: usize,
    },
    /// Sampling settings the sampler refuses (the reason, as
    /// [`SamplingParams::validate`](crate::engine::SamplingParams::validate) words it).
    Sampling(String),
    /// The KV pool cannot hold the request even alone.
    PoolTooSmall {
        /// Blocks the request needs.
        need: usize,
        /// The tokens it may hold (prompt + `max_new_tokens`, capped at the limit).
        tokens: usize,
        /// Blocks in the pool.
        pool: usize,
    },
    /// Speculation with a draft model on an engine that has none.
    NoDraftModel,
    /// Speculation asked for on an engine that evicts token rows (`--kv-evict`): a verify
    /// step's rows would cross eviction points.
    SpecWithEviction,
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::EmptyPrompt => write!(f, "the prompt is empty (0 tokens)"),
            RequestError::ZeroMaxTokens => write!(f, "max_new_tokens must be at least 1"),
            RequestError::PromptTooLong { prompt, max_len } => write!(
                f,
                "the prompt is {prompt} tokens, which does not fit --max-model-len {max_len} (the prompt and at least one generated token)"
            ),
            RequestError::TooManyTokens {
                prompt,
                max_new_tokens,
                max_len,
            } => write!(
                f,
                "max_new_tokens {max_new_tokens} with a {prompt}-token prompt is more than --max-model-len {max_len} tokens"
            ),
            RequestError::PromptTokenOutOfVocab { token, vocab } => {
                write!(f, "prompt: token id {token} is outside the vocabulary of {vocab}")
            }
            RequestError::StopTokenOutOfVocab { token, vocab } => {
                write!(f, "stop_token_ids: {token} is outside the vocabulary of {vocab}")
            }
            RequestError::Sampling(why) => write!(f, "{why}"),
            RequestError::NoDraftModel => write!(
                f,
                "speculative: the draft-model method needs a draft model, and this engine has none (start it with --spec draft --draft-model FILE)"
            ),
            RequestError::SpecWithEviction => write!(
                f,
                "speculative: this engine evicts token rows (--kv-evict), which speculative decoding cannot be combined with"
            ),
            RequestError::PoolTooSmall { need, tokens, pool } => write!(
                f,
                "the request needs {need} KV blocks ({tokens} tokens) but the pool has {pool}: it cannot run even alone; raise --kv-mem"
            ),
        }
    }
}

impl std::error::Error for RequestError {}

/// A request that passed [`LlmEngine::validate`](crate::engine::llm_engine::LlmEngine::validate),
/// ready for [`LlmEngine::add`](crate::engine::llm_engine::LlmEngine::add): the type says
/// it was checked, so it is not checked again.
#[derive(Debug, Clone)]
pub struct ValidRequest(pub(crate) Request);

impl ValidRequest {
    /// The request.
    pub fn request(&self) -> &Request {
        &self.0
    }
}

/// What a request is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most tokens one sequence may hold (`--max-model-len`, or the context window).
    pub max_len: usize,
    /// The model's vocabulary size.
    pub vocab_size: usize,
    /// Refuse a `max_new_tokens` past `max_len` after the prompt (a client's own
    /// `max_tokens`, as vLLM refuses it) instead of capping it (a default).
    pub refuse_past_max_len: bool,
}

/// Check `request` against `limits`, in the order a client sees its errors: an empty prompt,
/// no token to generate, a prompt that leaves no room, a `max_tokens` past the limit, token
/// ids outside the vocabulary (prompt, then stop ids), sampling settings. The pool's
/// capacity is the batched engine's own last check
/// ([`LlmEngine::validate`](crate::engine::llm_engine::LlmEngine::validate)).
pub fn check(request: &Request, limits: &Limits) -> Result<(), RequestError> {
    let prompt = request.prompt_ids.len();
    let max_len = limits.max_len;
    let vocab = limits.vocab_size;
    if prompt == 0 {
        return Err(RequestError::EmptyPrompt);
    }
    if request.max_new_tokens == 0 {
        return Err(RequestError::ZeroMaxTokens);
    }
    if prompt >= max_len {
        return Err(RequestError::PromptTooLong { prompt, max_len });
    }
    if limits.refuse_past_max_len && prompt.saturating_add(request.max_new_tokens) > max_len {
        return Err(RequestError::TooManyTokens {
            prompt,
            max_new_tokens: request.max_new_tokens,
            max_len,
        });
    }
    let outside = |ids: &[u32]| ids.iter().copied().find(|&t| t as usize >= vocab);
    if let Some(token) = outside(&request.prompt_ids) {
        return Err(RequestError::PromptTokenOutOfVocab { token, vocab });
    }
    if let Some(token) = outside(&request.stop_token_ids) {
        return Err(RequestError::StopTokenOutOfVocab { token, vocab });
    }
    request
        .sampling
        .validate()
        .map_err(|e| RequestError::Sampling(format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{CacheConfig, DecodeMode, SamplingParams};

    fn request(prompt: Vec<u32>, max_new_tokens: usize) -> Request {
        Request {
            prompt_ids: prompt,
            max_new_tokens,
            sampling: SamplingParams::greedy(),
            mode: DecodeMode::KvCache,
            cache: CacheConfig::default(),
            stop_token_ids: Vec::new(),
            stop_strings: Vec::new(),
            ignore_eos: false,
            speculative: Default::default(),
        }
    }

    const LIMITS: Limits = Limits {
        max_len: 8,
        vocab_size: 100,
        refuse_past_max_len: false,
    };

    /// Each refusal, in the order a client sees them, and the engine's wording.
    #[test]
    fn each_refusal_is_typed_and_worded() {
        assert_eq!(
            check(&request(vec![], 1), &LIMITS),
            Err(RequestError::EmptyPrompt)
        );
        assert_eq!(
            check(&request(vec![1], 0), &LIMITS),
            Err(RequestError::ZeroMaxTokens)
        );
        let long = check(&request(vec![1; 8], 1), &LIMITS);
        assert_eq!(
            long,
            Err(RequestError::PromptTooLong {
                prompt: 8,
                max_len: 8
            })
        );
        assert_eq!(
            check(&request(vec![1; 4], 5), &LIMITS),
            Ok(()),
            "capped, not refused"
        );
        let strict = Limits {
            refuse_past_max_len: true,
            ..LIMITS
        };
        assert!(matches!(
            check(&request(vec![1; 4], 5), &strict),
            Err(RequestError::TooManyTokens { .. })
        ));
        let bad = check(&request(vec![1, 100], 1), &LIMITS);
        assert_eq!(
            bad.map_err(|e| e.to_string()),
            Err("prompt: token id 100 is outside the vocabulary of 100".to_string())
        );
        let mut r = request(vec![1], 1);
        r.stop_token_ids = vec![7, 200];
        assert_eq!(
            check(&r, &LIMITS),
            Err(RequestError::StopTokenOutOfVocab {
                token: 200,
                vocab: 100
            })
        );
        r.stop_token_ids.clear();
        r.sampling.top_p = Some(0.0);
        assert!(matches!(check(&r, &LIMITS), Err(RequestError::Sampling(_))));
    }
}
