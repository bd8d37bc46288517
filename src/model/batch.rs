//! [`SeqChunk`]: one sequence's share of a batched forward pass — the forward pass's input in
//! continuous batching (vLLM's "flattened" batch: the rows of every scheduled sequence one
//! after another, each with its own positions and block table).
use crate::kv::BlockTable;
use crate::model::ModelConfig;

/// The new tokens of one sequence in a forward pass, at positions `start_pos ..
/// start_pos + tokens.len()`, written to and read through `table`.
///
/// A row is a **prompt row** when its position is below `prompt_end`: it runs on the prefill
/// kernels (dense f32 when the weights have a dense copy), any other row on the decode
/// kernels (quantized). That choice depends on the row's request and position only, never on
/// the batch (design rule R1), which keeps batched == alone and chunked == one-shot bit for
/// bit.
#[derive(Debug)]
pub struct SeqChunk<'a> {
    /// Token ids to run, ≥ 1.
    pub tokens: &'a [u32],
    /// Position of the first token; must equal `table.len()` (the tokens already cached).
    /// Its row in a group that evicted rows is `table.row_of(group, start_pos)`.
    pub start_pos: usize,
    /// Positions below this are prompt rows.
    pub prompt_end: usize,
    /// The sequence's block table, already covering `start_pos + tokens.len()` positions
    /// (the caller reserved the blocks; it commits the new length after success).
    pub table: &'a BlockTable,
    /// Rows (0 = the first new token) from which to return logits; None for a prefill chunk
    /// that is not the prompt's last.
    pub logits_from: Option<usize>,
    /// Where each attention layer logs the query rows an eviction policy scores keys with
    /// ([`crate::kv::evict::QueryLog`]); None: nothing logged.
    pub observe: Option<&'a crate::kv::evict::QueryLog>,
    /// Rows each layer's attention leaves out, `[layer][kv_head][row]` (`true`: masked):
    /// the masking oracle of token eviction; None: every row is read.
    pub mask: Option<&'a [Vec<Vec<bool>>]>,
}

impl SeqChunk<'_> {
    /// Rows in the chunk.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True for a chunk with no token (refused by the forward pass).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Whether each row is a prompt row (position < `prompt_end`).
    pub fn prompt_rows(&self) -> impl Iterator<Item = bool> + '_ {
        (0..self.tokens.len()).map(|i| self.start_pos + i < self.prompt_end)
    }

    /// Checks the chunk against the model (`config`) and the pool's `block_size` before a
    /// forward pass: at least one token, `start_pos` equal to the cached length, positions
    /// within `max_position_embeddings` and the reserved blocks, ids in the vocabulary,
    /// `logits_from` inside the chunk.
    ///
    /// Errors: the first of those that fails, as a candle error (the forward pass's type).
    pub fn check(&self, config: &ModelConfig, block_size: usize) -> candle_core::Result<()> {
        let c = config;
        let n = self.len();
        if n == 0 {
            candle_core::bail!("forward needs at least one token");
        }
        if self.start_pos != self.table.len() {
            candle_core::bail!(
                "start_pos {} does not match the KV cache length {}",
                self.start_pos,
                self.table.len()
            );
        }
        if self.start_pos + n > c.max_position_embeddings {
            candle_core::bail!(
                "positions up to {} exceed the context window of {} tokens",
                self.start_pos + n,
                c.max_position_embeddings
            );
        }
        let groups = self.table.list_lens().len().max(1);
        if let Some(g) =
            (0..groups).find(|&g| !self.table.covers(g, self.start_pos + n, block_size))
        {
            candle_core::bail!(
                "the block table's group {g} covers {} positions, not {}",
                self.table.group(g).len() * block_size + self.table.evicted(g),
                self.start_pos + n
            );
        }
        if let Some(bad) = self.tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
            candle_core::bail!(
                "token id {bad} is outside the vocabulary of {}",
                c.vocab_size
            );
        }
        if let Some(f) = self.logits_from {
            if f >= n {
                candle_core::bail!("logits from row {f} of a {n}-token forward pass");
            }
        }
        Ok(())
    }
}
