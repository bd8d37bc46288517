//! Tensors of the ggml types our kernels run that candle's GGUF reader does not know
//! ([`ForeignType`]: MXFP4), as the header reader (`header.rs`) keeps them aside.

/// A ggml tensor type our kernels run that candle's GGUF reader does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeignType {
    /// ggml type 39 (gpt-oss's experts): blocks of 32 values, an E8M0 scale byte and 16
    /// bytes of 4-bit E2M1 codes (OCP Microscaling Formats v1.0; ggml `block_mxfp4`).
    Mxfp4,
}

impl ForeignType {
    /// (values per block, bytes per block).
    pub fn block(self) -> (u64, u64) {
        match self {
            ForeignType::Mxfp4 => (32, 17),
        }
    }

    /// ggml's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            ForeignType::Mxfp4 => "MXFP4",
        }
    }
}

/// A tensor of a [`ForeignType`]: its shape (candle's order, `[rows, columns]` for a
/// matrix) and offset from the start of the tensor data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignTensor {
    /// The type.
    pub ty: ForeignType,
    /// Dimensions, outermost first.
    pub dims: Vec<usize>,
    /// Byte offset from the start of the tensor data (`Content::tensor_data_offset`).
    pub offset: u64,
}

impl ForeignTensor {
    /// Bytes of the tensor's data.
    pub fn bytes(&self) -> u64 {
        let (block, size) = self.ty.block();
        self.dims.iter().product::<usize>() as u64 / block * size
    }
}
