//! [`GgufFile`]: an opened GGUF file, its header read (its methods: opening and reading in
//! `mod.rs`, the tensors our kernels run in `matrices.rs`).
use candle_core::quantized::gguf_file::Content;
use std::fs::File;
use std::io::BufReader;

/// An opened GGUF file whose header was read and checked against the file size.
pub struct GgufFile {
    /// Header: metadata and tensor infos.
    pub content: Content,
    pub(super) reader: BufReader<File>,
    pub(super) path: String,
    /// Keep an f32 copy of every matrix, packed for our prefill GEMM (see [`crate::model::linear::Linear::packed`]).
    pub dense_prefill: bool,
}
