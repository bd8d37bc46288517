//! Accuracy of the engine's choices, measured the way llama.cpp's tools measure them:
//! [`perplexity`] over a text in chunks, and [`kld`], the KL divergence of a run (say a q8_0
//! KV cache) from a saved base run (the f32 cache).
pub mod kld;
pub mod perplexity;
