//! A tensor's bytes as the file holds them, read through a mapping of the file: the repack
//! reads the page cache on every thread, with no copy (a copy into a buffer of ours was ~9%
//! of a load's time, on one thread), the kernel reading ahead meanwhile. Each tensor's pages
//! leave our address space once it is repacked, so the mapped file adds one tensor, not the
//! whole file, to the peak RSS.
use super::file::GgufFile;
use anyhow::{bail, Context, Result};
use memmap2::{Advice, Mmap, UncheckedAdvice};

/// How far past a tensor the kernel is asked to read ahead (`MADV_WILLNEED`): about a layer
/// of a 30B mixture of experts, so the disk keeps reading while a layer repacks.
const READ_AHEAD: usize = 512 << 20;

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

    /// Tensor `name`'s bytes, from the file's mapping (made on the first call). The header
    /// checked that every tensor ends inside the file. Errors: absent (named), or the file
    /// cannot be mapped.
    pub(super) fn raw(&mut self, name: &str) -> Result<&[u8]> {
        let Some((at, len)) = self.span(name) else {
            bail!(
                "{}: tensor {name} is missing (the model's architecture needs it)",
                self.path
            );
        };
        let map = match self.map.take() {
            Some(m) => m,
            // SAFETY: mapped read-only; as with every mmap-based loader (llama.cpp, candle),
            // the mapping assumes no other process truncates or rewrites the file while the
            // model loads. Every tensor is copied out of it, and it is dropped after the load.
            None => unsafe { Mmap::map(self.reader.get_ref()) }
                .with_context(|| format!("{}: cannot map the file", self.path))?,
        };
        let map = self.map.insert(map);
        let (at, len) = (at as usize, len as usize);
        let end = at + len;
        if end > map.len() {
            bail!(
                "{}: tensor {name} ends at byte {end} but the file now has {} bytes (was it rewritten while loading?)",
                self.path,
                map.len()
            );
        }
        // Hints: where refused (an older kernel), the repack's reads fault the pages in.
        let _ = map.advise_range(Advice::WillNeed, end, READ_AHEAD.min(map.len() - end));
        #[cfg(target_os = "linux")]
        let _ = map.advise_range(Advice::PopulateRead, at, len);
        Ok(&map[at..end])
    }

    /// Take tensor `name`'s pages out of our address space once it is repacked (they stay
    /// in the page cache): the peak RSS holds our copy of the weights, not the file's too.
    pub(super) fn release(&self, name: &str) {
        if let (Some(map), Some((at, len))) = (&self.map, self.span(name)) {
            // SAFETY: a read-only shared mapping of a file: a page dropped here is mapped
            // again from the page cache, with the same bytes, if anything reads it later
            // (the neighbour tensor sharing a boundary page does).
            let _ = unsafe {
                map.unchecked_advise_range(UncheckedAdvice::DontNeed, at as usize, len as usize)
            };
        }
    }
}
