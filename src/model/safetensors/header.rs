//! A first pass over a safetensors file's start, before candle's reader maps it, so a damaged
//! or foreign file gets one line naming the file and what is wrong (candle's reader says
//! `HeaderTooLarge` or `InvalidHeaderLength` without the numbers).
//!
//! Source: the safetensors format (huggingface/safetensors README): an 8-byte little-endian
//! header length N, then N bytes of JSON starting with `{`, then the tensor data. The reader
//! refuses headers over 100,000,000 bytes (`MAX_HEADER_SIZE`); so does this check. Nothing
//! is allocated from N: only its first byte is read.
use anyhow::{bail, Context, Result};
use std::io::Read;

/// The largest header the safetensors reader accepts (its `MAX_HEADER_SIZE`).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Check the start of the safetensors file read by `r` (at its start), `file_len` bytes
/// long; `shown` names the file in errors. Errors (one line each): shorter than the 8-byte
/// header length, a header length past the end of the file or over the format's limit, a
/// header that is not a JSON object.
pub fn check_header<R: Read>(r: &mut R, file_len: u64, shown: &str) -> Result<()> {
    if file_len < 8 {
        bail!("{shown} is not a safetensors file: {file_len} bytes, too short for its 8-byte header length");
    }
    let mut len = [0u8; 8];
    r.read_exact(&mut len)
        .with_context(|| format!("{shown}: cannot read"))?;
    let n = u64::from_le_bytes(len);
    let room = file_len - 8;
    if n > room {
        bail!("{shown} is not a safetensors file or is truncated: its header length says {n} bytes but {room} bytes follow");
    }
    if n > MAX_HEADER_BYTES {
        bail!("{shown}: its safetensors header is {n} bytes, over the format's limit of {MAX_HEADER_BYTES}");
    }
    let mut first = [0u8; 1];
    if n == 0 || r.read_exact(&mut first).is_err() || first[0] != b'{' {
        bail!("{shown} is not a safetensors file: its header does not start with a JSON object");
    }
    Ok(())
}
