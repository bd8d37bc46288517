//! Our reader of a GGUF file's header ([`read_header`]): the metadata and tensor infos as
//! candle's [`Content`] (whose tensors candle then reads), with every check llama.cpp's
//! `gguf_init_from_file` makes that candle's own reader does not (candle keeps the last of two
//! equal keys, divides by a zero `general.alignment`, calls an IQ2 tensor a "corrupt
//! header"), and the tensors of types candle does not know but our kernels run (MXFP4) kept
//! aside ([`Header::foreign`]).
//!
//! Source: the GGUF spec (ggml `docs/gguf.md`): magic `GGUF`, u32 version, u64 tensor count,
//! u64 metadata count, the metadata (u64-length string key, u32 value type, value), the tensor
//! infos (name, u32 n_dims, u64 dims, u32 ggml type, u64 offset), padding to
//! `general.alignment` (default 32), the data. Checks, as llama.cpp's reader: version 2 or 3;
//! no key and no tensor name twice; `general.alignment` a u32 power of two; at most 4 dims;
//! a tensor's first dim a multiple of its type's block; each tensor at the offset where the
//! previous one ends (padded to the alignment); the data inside the file. Every length is
//! checked against the bytes left in the file before anything is read or skipped, so a
//! damaged count never allocates.
use anyhow::{bail, Result};
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value, VersionedMagic};
use candle_core::quantized::GgmlDType;
use std::collections::{HashMap, HashSet};
use std::io::Read;

pub use super::foreign::{ForeignTensor, ForeignType};

/// GGUF metadata value types (the spec's `gguf_metadata_value_type`).
const STRING: u32 = 8;
const ARRAY: u32 = 9;
const U32: u32 = 4;
/// Arrays of arrays deeper than this are refused (the spec allows nesting; no model nests).
const MAX_ARRAY_DEPTH: usize = 4;
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// The longest tensor name ggml takes (`GGML_MAX_NAME` 64, with its terminating NUL).
const MAX_NAME_BYTES: usize = 63;
/// The longest metadata key taken (no model's key comes near; bounds what a message prints).
const MAX_KEY_BYTES: usize = 1024;
/// The data alignment when `general.alignment` is absent (`GGUF_DEFAULT_ALIGNMENT`).
const DEFAULT_ALIGNMENT: u64 = 32;

/// The tensor types our kernels run, as ggml names them (the refusals list them).
pub const RUNNABLE: &str =
    "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4";

/// A GGUF header as [`read_header`] reads it.
pub struct Header {
    /// The metadata and the tensors of the types candle reads.
    pub content: Content,
    /// The tensors of types candle does not know, by name.
    pub foreign: HashMap<String, ForeignTensor>,
}

/// Read and check the header of the GGUF file read by `r` (at its start), `file_len` bytes
/// long; `shown` names the file in errors. Every length is checked against the bytes left
/// before anything is allocated. Errors (one line each, naming the key or tensor): not GGUF,
/// version 1 or above 3, a duplicated key or tensor name, a bad `general.alignment`, an
/// unknown value type, a length past the end of the file, more than 4 dims, a tensor type
/// nanollm's kernels do not run (named: IQ2_XXS, ...), a tensor size that overflows or is not
/// a whole number of blocks, a tensor out of place, data past the end of the file.
pub fn read_header<R: Read>(r: &mut R, file_len: u64, shown: &str) -> Result<Header> {
    let mut h = Reader {
        r,
        pos: 0,
        len: file_len,
        shown,
    };
    if h.array::<4>().ok() != Some(*b"GGUF") {
        bail!("{shown} is not a GGUF file (it does not start with the GGUF magic bytes)");
    }
    let magic = match h.u32()? {
        2 => VersionedMagic::GgufV2,
        3 => VersionedMagic::GgufV3,
        1 => bail!("{shown}: GGUF version 1 is not supported (llama.cpp refuses it too): convert the model again with a current llama.cpp"),
        v => bail!("{shown}: GGUF version {v} is not one this reader knows (2 and 3){}", if v > 0xffff { "; a big-endian GGUF?" } else { "" }),
    };
    let n_tensors = h.u64()?;
    let n_kv = h.u64()?;
    // The smallest entries: an empty key + type + a u8 (13 bytes); an empty name + n_dims +
    // type + offset (24 bytes).
    if n_kv > h.left() / 13 || n_tensors > h.left() / 24 {
        bail!("{shown}: corrupt or truncated GGUF header ({n_kv} metadata keys and {n_tensors} tensors cannot fit in {file_len} bytes)");
    }
    let mut metadata = HashMap::new();
    let mut alignment = DEFAULT_ALIGNMENT;
    for _ in 0..n_kv {
        let key = h.name("a metadata key", MAX_KEY_BYTES)?;
        let ty = h.u32()?;
        if metadata.contains_key(&key) {
            bail!("{shown}: metadata key {key} appears twice (llama.cpp refuses such a file too)");
        }
        if key == "general.alignment" {
            if ty != U32 {
                bail!("{shown}: general.alignment has value type {ty}, expected u32 (4)");
            }
            let a = h.u32()?;
            if a == 0 || !a.is_power_of_two() {
                bail!("{shown}: general.alignment is {a}: it must be a power of two");
            }
            alignment = a.into();
            metadata.insert(key, Value::U32(a));
        } else {
            let v = h.value(&key, ty, 0)?;
            metadata.insert(key, v);
        }
    }
    let mut tensor_infos = HashMap::new();
    let mut foreign = HashMap::new();
    let mut names = HashSet::new();
    let mut expected_offset = 0u64;
    for _ in 0..n_tensors {
        let name = h.name("a tensor name", MAX_NAME_BYTES)?;
        if !names.insert(name.clone()) {
            bail!("{shown}: tensor {name} appears twice (llama.cpp refuses such a file too)");
        }
        let n_dims = h.u32()?;
        if n_dims > MAX_DIMS {
            bail!(
                "{shown}: tensor {name} has {n_dims} dimensions (ggml allows at most {MAX_DIMS})"
            );
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(h.u64()?);
        }
        let ty = h.u32()?;
        let dtype = match (ty, dtype(ty)) {
            (39, _) => Err(ForeignType::Mxfp4),
            (_, Ok(d)) => Ok(d),
            (_, Err(what)) => bail!("{shown}: tensor {name} is {what}, a type nanollm's kernels do not run (they run {RUNNABLE}); requantize the file with llama.cpp's `llama-quantize`"),
        };
        let offset = h.u64()?;
        let elems = dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64);
        let Some(elems) = elems else {
            bail!("{shown}: tensor {name} has dimensions {dims:?}: too many elements");
        };
        let (block, type_size) = match dtype {
            Ok(d) => (d.block_size() as u64, d.type_size() as u64),
            Err(f) => f.block(),
        };
        if dims.first().is_some_and(|&d| d % block != 0) {
            bail!("{shown}: tensor {name} has {} values per row, not a multiple of its type's block of {block}", dims[0]);
        }
        let bytes = (elems / block)
            .checked_mul(type_size)
            .filter(|&b| b <= i64::MAX as u64);
        let Some(bytes) = bytes else {
            bail!("{shown}: tensor {name} has dimensions {dims:?}: its size overflows ({elems} values, {type_size} bytes per {block}, past 2^63 bytes)");
        };
        if offset != expected_offset {
            bail!("{shown}: tensor {name} is at data offset {offset}, expected {expected_offset} (tensors are stored one after another; llama.cpp refuses this file too)");
        }
        let Some(end) = offset
            .checked_add(bytes)
            .and_then(|e| e.checked_next_multiple_of(alignment))
        else {
            bail!("{shown}: tensor {name} at data offset {offset} with {bytes} bytes: its end overflows");
        };
        expected_offset = end;
        // candle's order: outermost dimension first.
        let shape: Vec<usize> = dims.iter().rev().map(|&d| d as usize).collect();
        match dtype {
            Ok(ggml_dtype) => {
                let info = TensorInfo {
                    ggml_dtype,
                    shape: shape.into(),
                    offset,
                };
                tensor_infos.insert(name, info);
            }
            Err(ty) => {
                let t = ForeignTensor {
                    ty,
                    dims: shape,
                    offset,
                };
                foreign.insert(name, t);
            }
        }
    }
    let data_start = h.pos.next_multiple_of(alignment);
    if data_start.saturating_add(expected_offset) > file_len.next_multiple_of(alignment) {
        bail!("{shown} is truncated: its tensors need {expected_offset} bytes of data from byte {data_start}, but the file has {file_len} bytes");
    }
    let content = Content {
        magic,
        metadata,
        tensor_infos,
        tensor_data_offset: data_start,
    };
    Ok(Header { content, foreign })
}

/// The candle type of ggml type `ty`, or its name (ggml.h's `ggml_type`) when candle does
/// not read it.
fn dtype(ty: u32) -> Result<GgmlDType, String> {
    use GgmlDType as D;
    Ok(match ty {
        0 => D::F32,
        1 => D::F16,
        2 => D::Q4_0,
        3 => D::Q4_1,
        6 => D::Q5_0,
        7 => D::Q5_1,
        8 => D::Q8_0,
        9 => D::Q8_1,
        10 => D::Q2K,
        11 => D::Q3K,
        12 => D::Q4K,
        13 => D::Q5K,
        14 => D::Q6K,
        15 => D::Q8K,
        30 => D::BF16,
        _ => {
            let name = match ty {
                16 => "IQ2_XXS",
                17 => "IQ2_XS",
                18 => "IQ3_XXS",
                19 => "IQ1_S",
                20 => "IQ4_NL",
                21 => "IQ3_S",
                22 => "IQ2_S",
                23 => "IQ4_XS",
                24 => "I8",
                25 => "I16",
                26 => "I32",
                27 => "I64",
                28 => "F64",
                29 => "IQ1_M",
                34 => "TQ1_0",
                35 => "TQ2_0",
                39 => "MXFP4",
                _ => return Err(format!("ggml type {ty}, unknown to ggml")),
            };
            return Err(format!("{name} (ggml type {ty})"));
        }
    })
}

/// The reader, its position and the file's length.
struct Reader<'a, R> {
    r: &'a mut R,
    pos: u64,
    len: u64,
    shown: &'a str,
}

impl<R: Read> Reader<'_, R> {
    fn left(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    /// `n` bytes. Errors: past the end of the file.
    fn bytes(&mut self, n: u64) -> Result<Vec<u8>> {
        self.check_left(n)?;
        let mut b = vec![0u8; n as usize];
        self.r.read_exact(&mut b)?;
        self.pos += n;
        Ok(b)
    }

    /// Errors: fewer than `n` bytes left in the file.
    fn check_left(&self, n: u64) -> Result<()> {
        if n > self.left() {
            bail!("{}: corrupt or truncated GGUF header (it reads {n} bytes at byte {}, past the end of the file at {})", self.shown, self.pos, self.len);
        }
        Ok(())
    }

    /// `N` bytes into an array. Errors: past the end of the file.
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.check_left(N as u64)?;
        let mut a = [0u8; N];
        self.r.read_exact(&mut a)?;
        self.pos += N as u64;
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A key or tensor name (`what`): a string of at most `max` bytes with no control
    /// characters, so every later message can print it as is. Errors show the first 48
    /// characters, escaped.
    fn name(&mut self, what: &str, max: usize) -> Result<String> {
        let s = self.string(what)?;
        if s.len() > max || s.chars().any(char::is_control) {
            let shown: String = s.chars().take(48).collect();
            bail!(
                "{}: {what} {:?}{} is not a name ({} bytes; at most {max}, no control characters)",
                self.shown,
                shown,
                if s.chars().count() > 48 { "…" } else { "" },
                s.len()
            );
        }
        Ok(s)
    }

    /// A u64-length string (`what` names it in errors), lossily UTF-8.
    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64()?;
        if n > self.left() {
            bail!("{}: corrupt or truncated GGUF header ({what} of {n} bytes at byte {} runs past the end of the file)", self.shown, self.pos);
        }
        Ok(String::from_utf8_lossy(&self.bytes(n)?).into_owned())
    }

    /// One value of type `ty` of key `key` (inside `depth` arrays). Errors: an unknown
    /// type, arrays nested too deep, a length past the end of the file.
    fn value(&mut self, key: &str, ty: u32, depth: usize) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.array::<1>()?[0]),
            1 => Value::I8(self.array::<1>()?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array()?)),
            3 => Value::I16(i16::from_le_bytes(self.array()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.array()?)),
            6 => Value::F32(f32::from_le_bytes(self.array()?)),
            7 => Value::Bool(self.array::<1>()?[0] != 0),
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.array()?)),
            12 => Value::F64(f64::from_le_bytes(self.array()?)),
            STRING => {
                let what = format!("metadata key {key}: a string");
                Value::String(self.string(&what)?)
            }
            ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    bail!(
                        "{}: metadata key {key} nests arrays more than {MAX_ARRAY_DEPTH} deep",
                        self.shown
                    );
                }
                let elem = self.u32()?;
                let count = self.u64()?;
                // Each element takes at least its fixed size, a string or array at least 8
                // bytes (a length, or a type and a count): the count is bounded by the file.
                match fixed_size(elem) {
                    Some(size) if count.saturating_mul(size) > self.left() => bail!(
                        "{}: corrupt or truncated GGUF header (metadata key {key}: an array of {count} values of {size} bytes at byte {} runs past the end of the file at {})",
                        self.shown,
                        self.pos,
                        self.len
                    ),
                    Some(_) => {}
                    None if elem == STRING || elem == ARRAY => {
                        if count > self.left() / 8 {
                            bail!("{}: corrupt or truncated GGUF header (metadata key {key}: an array of {count} elements cannot fit in the file)", self.shown);
                        }
                    }
                    None => bail!(
                        "{}: metadata key {key} is an array of unknown value type {elem}",
                        self.shown
                    ),
                }
                let items = (0..count)
                    .map(|_| self.value(key, elem, depth + 1))
                    .collect::<Result<Vec<_>>>()?;
                Value::Array(items)
            }
            _ => bail!(
                "{}: metadata key {key} has unknown value type {ty}",
                self.shown
            ),
        })
    }
}

/// Bytes of a fixed-size GGUF value type; `None` for strings, arrays and unknown types.
fn fixed_size(ty: u32) -> Option<u64> {
    match ty {
        0 | 1 | 7 => Some(1), // u8, i8, bool
        2 | 3 => Some(2),     // u16, i16
        4..=6 => Some(4),     // u32, i32, f32
        10..=12 => Some(8),   // u64, i64, f64
        _ => None,
    }
}
