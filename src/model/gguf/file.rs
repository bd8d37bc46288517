//! [`GgufFile`]: an opened GGUF file, its header read (its methods: opening and reading in
//! `mod.rs`, the tensors our kernels run in `matrices.rs`).
use super::header::ForeignTensor;
use candle_core::quantized::gguf_file::Content;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;

/// An opened GGUF file whose header was read and checked against the file size.
pub struct GgufFile {
    /// Header: metadata and the infos of the tensors candle reads.
    pub content: Content,
    /// The tensors of types candle does not know (MXFP4), read by us.
    pub foreign: HashMap<String, ForeignTensor>,
    pub(super) reader: BufReader<File>,
    /// The file mapped for reading its tensors' bytes (`raw.rs`), while the model loads.
    pub(super) map: Option<memmap2::Mmap>,
    pub(super) path: String,
    /// Keep an f32 copy of every matrix, packed for our prefill GEMM (see [`crate::model::linear::Linear::packed`]).
    pub dense_prefill: bool,
}
