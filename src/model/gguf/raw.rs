//! A tensor's bytes as the file holds them, read into one buffer reused from tensor to
//! tensor (a fresh buffer per tensor cost a page fault per 4 KiB of the model, twice over
//! with candle's reader), with the part of the file that follows read ahead by the kernel
//! while the caller repacks this one.
use super::file::GgufFile;
use anyhow::{bail, Context, Result};
use std::os::unix::fs::FileExt;

/// How far past a tensor the kernel is asked to read ahead (`POSIX_FADV_WILLNEED`): about
/// a layer of a 30B mixture of experts, so the disk keeps reading while a layer repacks.
const READ_AHEAD: u64 = 512 << 20;

impl GgufFile {
    /// Where tensor `name`'s bytes lie in the file: (offset, length). None when absent.
    pub(super) fn span(&self, name: &str) -> Option<(u64, u64)> {
        let base = self.content.tensor_data_offset;
        if let Some(t) = self.foreign.get(name) {
            return Some((base + t.offset, t.bytes()));
        }
        let info = self.content.tensor_infos.get(name)?;
        let elems = info.shape.elem_count() as u64;
        let block = info.ggml_dtype.block_size() as u64;
        let bytes = elems.div_ceil(block) * info.ggml_dtype.type_size() as u64;
        Some((base + info.offset, bytes))
    }

    /// Tensor `name`'s bytes, in a buffer the next call reuses. The header checked that
    /// every tensor ends inside the file. Errors: absent (named), or unreadable.
    pub(super) fn raw(&mut self, name: &str) -> Result<&[u8]> {
        let Some((at, len)) = self.span(name) else {
            bail!(
                "{}: tensor {name} is missing (the model's architecture needs it)",
                self.path
            );
        };
        let file = self.reader.get_ref();
        read_ahead(file, at + len);
        let len = len as usize;
        if self.scratch.len() < len {
            self.scratch.resize(len, 0);
        }
        let bytes = &mut self.scratch[..len];
        file.read_exact_at(bytes, at)
            .with_context(|| format!("{}: cannot read tensor {name}", self.path))?;
        Ok(bytes)
    }
}

/// Ask the kernel to read `[from, from + READ_AHEAD)` of `file` in the background. A hint:
/// where refused, reads go on as before.
fn read_ahead(file: &std::fs::File, from: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid open descriptor; the advice reads nothing into our memory.
        unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                from as libc::off_t,
                READ_AHEAD as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, from);
}
