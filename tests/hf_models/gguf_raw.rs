//! A GGUF writer of raw tensor bytes, for types candle's writer does not know (MXFP4): the
//! format as ggml `docs/gguf.md` gives it (version 3, alignment 32).
use candle_core::quantized::gguf_file::Value;
use std::io::Write;
use std::path::Path;

/// ggml type ids used here.
pub const F32: u32 = 0;
pub const MXFP4: u32 = 39;

fn value_type(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => string(out, s),
        Value::Array(items) => {
            let elem = items.first().map_or(4, value_type);
            out.extend(elem.to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            items.iter().for_each(|i| value(out, i));
        }
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
    }
}

/// Write `metadata` and `tensors` (name, dims outermost first as candle orders them, ggml
/// type id, the tensor's bytes) as a GGUF file at `path`.
pub fn write_raw(
    path: &Path,
    metadata: &[(String, Value)],
    tensors: &[(String, Vec<usize>, u32, Vec<u8>)],
) {
    let mut out = Vec::new();
    out.extend(b"GGUF");
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        string(&mut out, k);
        out.extend(value_type(v).to_le_bytes());
        value(&mut out, v);
    }
    let mut offset = 0u64;
    for (name, dims, ty, bytes) in tensors {
        string(&mut out, name);
        out.extend((dims.len() as u32).to_le_bytes());
        // ggml's order: innermost dimension first.
        for d in dims.iter().rev() {
            out.extend((*d as u64).to_le_bytes());
        }
        out.extend(ty.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offset = (offset + bytes.len() as u64).next_multiple_of(32);
    }
    out.resize(out.len().next_multiple_of(32), 0);
    for (_, _, _, bytes) in tensors {
        out.extend(bytes);
        out.resize(out.len().next_multiple_of(32), 0);
    }
    let mut f = std::fs::File::create(path).expect("create gguf");
    f.write_all(&out).expect("write gguf");
}
