//! Speculative decoding: the tokens equal plain decoding's bit for bit — in the batched
//! engine (prompt lookup, k = 1 ..= 8, alone and batched, seeded sampling, stops,
//! preemption; blocks exact after every step), in the one-request loop (`generate --spec`)
//! on the default model and Gemma 3 (K-quants, sliding layers), with sampling the token at
//! a drafted position follows the sampler's distribution (chi-square over 10^4 seeds), and
//! the command line, serve's per-request field and bench's synthetic sweep.
mod cli;
#[path = "../common/mod.rs"]
mod common;
mod draft;
mod engine;
mod generate;
mod sampling;

use nanollm::engine::{CacheConfig, Request, SamplingParams};
use nanollm::model::Loaded;

/// A passage to copy (prompt lookup drafts from it) and free questions (few drafts hold).
pub const PASSAGE: &str = "The committee met on Tuesday to review the budget for the new library. \
After a long discussion, the members agreed to fund the reading room, the children's \
section and the archive, but postponed the roof repairs until the spring.";
pub const PROMPTS: [&str; 4] = [
    "Repeat the following text exactly, word for word:\n\n{P}\n\nRepeat:",
    "What is the capital of France?",
    "Copy this sentence twice: {P}",
    "Write a haiku about the sea at night.",
];

/// One request per prompt of [`PROMPTS`], `n` tokens each, EOS ignored.
pub fn requests(
    m: &Loaded,
    n: usize,
    sampling: SamplingParams,
    cache: CacheConfig,
) -> Vec<Request> {
    PROMPTS
        .iter()
        .map(|p| {
            let mut r = common::greedy_request(m, &p.replace("{P}", PASSAGE), n, cache);
            r.sampling = sampling.clone();
            r
        })
        .collect()
}
