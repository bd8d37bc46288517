//! Causal GQA attention over the paged KV cache, on the CPU: one KV-head group of one query
//! row per task, or, for a prompt's rows where the CPU has AVX-512F, of a tile of 8
//! consecutive rows per task (`kernels::attention::prefill_tile`: each K/V row read and converted
//! once per tile, 1.5–1.7× faster attention at 512–2,048-token prompts, the same bits).
//!
//! Each output row is computed by the same instructions in the same order whatever the
//! number of rows in the call and wherever the blocks start: a decode step (one row) and a
//! full recompute (every row) produce bit-identical results for the same position, at every
//! block size. That is what makes naive and KV-cached greedy decoding agree token for token,
//! even through quantized matmuls that round their inputs to 8 bits. K and V are read back
//! from the pool in their stored dtype for every key, the rows this forward pass just wrote
//! included. Reference: "Attention Is All You Need" (softmax(QKᵀ/√d)V); GQA per Ainslie et
//! al. 2023 (query head h reads KV head h / (heads / kv_heads)).
mod masked;
mod portable;
mod scratch;
#[cfg(target_arch = "x86_64")]
mod split;

use crate::kv::LayerKv;
use candle_core::{bail, Result};
use portable::attend_group_portable;
use rayon::prelude::*;
use scratch::Scratch;

/// Which kernel runs a group: AVX2 for head_dims that are whole q8_0 blocks, else portable.
#[derive(Debug, Clone, Copy)]
enum Simd {
    /// AVX2 + FMA + F16C, head_dim = 8 · chunks.
    #[cfg(target_arch = "x86_64")]
    Avx2 {
        chunks: usize,
    },
    Portable,
}

impl Simd {
    fn detect(head_dim: usize) -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            let chunks = head_dim / 8;
            if head_dim.is_multiple_of(8)
                && matches!(chunks, 4 | 8 | 12 | 16 | 24 | 32 | 72)
                && std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c")
                && !crate::cpu::portable_forced()
            {
                return Simd::Avx2 { chunks };
            }
        }
        let _ = head_dim;
        Simd::Portable
    }
}

thread_local! {
    /// This thread's scratch buffers and query-group copy, kept between calls (a new set per
    /// rayon split measured as allocation churn in batched decode).
    static SCRATCH: std::cell::RefCell<(Scratch, Vec<f32>)> = std::cell::RefCell::new(Default::default());
}

/// Which keys a query row at position `p` reads: every earlier one (causal attention), or
/// the last `size` of them, `p + 1 − size ..= p` (a sliding-window layer: HF's mask keeps
/// key positions > p − W, as llama.cpp's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// The window in tokens (config `sliding_window`); `None`: causal over the whole context.
    pub size: Option<usize>,
    /// Also score the keys before the window and drop them (`--swa-full`: a full cache read
    /// with the window as a mask, as llama.cpp does); the output bits do not change.
    pub scan_masked: bool,
}

impl Window {
    /// Every earlier key.
    pub const FULL: Window = Window {
        size: None,
        scan_masked: false,
    };

    /// The first key a row at position `pos` reads.
    pub fn first_key(&self, pos: usize) -> usize {
        self.size.map_or(0, |w| (pos + 1).saturating_sub(w))
    }
}

/// One group: `out[h] = softmax(q_h · K[lo..len]ᵀ) V[lo..len]` for the `g` query rows in `q`
/// (`[g][head_dim]`), keys and values of KV head `head`.
#[allow(clippy::too_many_arguments)]
fn attend_group(
    simd: Simd,
    q: &[f32],
    g: usize,
    kv: &LayerKv,
    head: usize,
    keys: (usize, usize),
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::attention::avx2 as x86;
        let s = &mut scratch.avx2;
        // SAFETY: Simd::detect chose Avx2 only when the CPU has AVX2, FMA and F16C and
        // head_dim = 8·chunks with chunks in {4, 8, 12, 16, 24, 32, 72}; lo < len ≤ the table's
        // capacity.
        if let Simd::Avx2 { chunks } = simd {
            // SAFETY: see above.
            return unsafe { x86::attend_group(chunks, q, g, kv, head, keys, s, out) };
        }
    }
    let _ = simd;
    attend_group_portable(q, g, kv, head, keys, scratch, out);
}

/// The scores of keys `0 .. lo` of KV head `head` for the `g` query rows in `q`, computed
/// and dropped ([`Window::scan_masked`]).
fn scan_masked(
    simd: Simd,
    q: &[f32],
    g: usize,
    kv: &LayerKv,
    head: usize,
    lo: usize,
    scratch: &mut Scratch,
) {
    if lo == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::attention::avx2 as x86;
        // SAFETY: as in attend_group; keys 0 .. lo are within the table.
        if let Simd::Avx2 { chunks } = simd {
            // SAFETY: see above.
            return unsafe { x86::scan_scores(chunks, q, g, kv, head, (0, lo), &mut scratch.avx2) };
        }
    }
    let _ = simd;
    portable::scan_portable(q, g, kv, head, lo, &mut scratch.row);
}

/// [`attend_group`] of a row at position `pos` under `window`, with the masked scan.
#[allow(clippy::too_many_arguments)]
fn attend_row(
    simd: Simd,
    q: &[f32],
    g: usize,
    kv: &LayerKv,
    head: usize,
    (pos, window): (usize, Window),
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    let lo = window.first_key(pos);
    if window.scan_masked {
        scan_masked(simd, q, g, kv, head, lo, scratch);
    }
    attend_group(simd, q, g, kv, head, (lo, pos + 1), scratch, out);
}

/// Query rows of one sequence in a call from which its K/V rows are not prefetched by hand
/// ([`LayerKv::prefetch`]): a prompt's rows re-read the same keys, which stay in cache, and
/// the prefetch instructions only cost (`examples/attention_bench`, 384 rows: 103–109 ms
/// without them, 110–163 with), while a decode row reads each key once, from memory.
pub const PREFETCH_BELOW_ROWS: usize = 4;

/// Keys below which a decode row is not split across threads (the forks cost more).
const SPLIT_MIN_KEYS: usize = 256;

/// Causal attention for `n` new query rows at positions `start_pos .. start_pos + n`, reading
/// K and V through `kv` (one layer of the sequence's block table, which already holds the
/// rows of these positions).
///
/// - `q`: `[heads, n, head_dim]` head-major, already scaled by 1/√head_dim and rotated.
/// - Returns `[n, heads · head_dim]` row-major.
///
/// Work is split into one task per (row, KV head): each K and V row is read once for the
/// `heads / kv_heads` query heads that share it; with AVX-512F, several rows are one task
/// per (tile of 8 rows, KV head), each row still bit-identical to its one-row result.
///
/// Errors: `heads` not a multiple of `kv_heads`, `q` of the wrong length, or positions past
/// the block table.
pub fn paged_attention(
    q: &[f32],
    heads: usize,
    kv_heads: usize,
    n: usize,
    start_pos: usize,
    kv: &LayerKv,
) -> Result<Vec<f32>> {
    paged_attention_in(q, heads, kv_heads, (n, start_pos), kv, Window::FULL)
}

/// [`paged_attention`] where each row reads the keys of `window` only (a sliding-window
/// layer), with the same range boundaries (absolute positions, design rule R4), so a row's
/// bits do not depend on how many rows run together or on the masked scan.
///
/// A rotated KV dtype ([`crate::kv::KvDtype::rotated`]: rows stored after a Hadamard
/// rotation) has its query rows rotated the same way first and the output rows rotated back
/// (the rotation is orthonormal and its own inverse), row by row, so the rules hold.
///
/// Errors: as [`paged_attention`], and a window of 0 tokens.
pub fn paged_attention_in(
    q: &[f32],
    heads: usize,
    kv_heads: usize,
    (n, start_pos): (usize, usize),
    kv: &LayerKv,
    window: Window,
) -> Result<Vec<f32>> {
    if !kv.dtype.rotated() {
        return attend_in(q, heads, kv_heads, (n, start_pos), kv, window);
    }
    let q = rotated_rows(q, kv.head_dim);
    let mut out = attend_in(&q, heads, kv_heads, (n, start_pos), kv, window)?;
    rotate_rows(&mut out, kv.head_dim);
    Ok(out)
}

/// Every `d`-value row of `x` rotated in place ([`crate::kv::codec_q4::rotate`]).
fn rotate_rows(x: &mut [f32], d: usize) {
    if d > 0 {
        x.chunks_exact_mut(d).for_each(crate::kv::codec_q4::rotate);
    }
}

/// A copy of `x` with every `d`-value row rotated.
fn rotated_rows(x: &[f32], d: usize) -> Vec<f32> {
    let mut x = x.to_vec();
    rotate_rows(&mut x, d);
    x
}

/// [`paged_attention_in`] on rows in the stored space (queries already rotated for a rotated
/// dtype).
fn attend_in(
    q: &[f32],
    heads: usize,
    kv_heads: usize,
    (n, start_pos): (usize, usize),
    kv: &LayerKv,
    window: Window,
) -> Result<Vec<f32>> {
    if window.size == Some(0) {
        bail!("a sliding window of 0 tokens");
    }
    let d = kv.head_dim;
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) || q.len() != heads * n * d {
        bail!("attention shapes disagree: q has {} values for {heads} heads × {n} rows × {d}, {kv_heads} KV heads", q.len());
    }
    if start_pos + n > kv.capacity() {
        bail!(
            "attention past the block table: positions up to {} but room for {}",
            start_pos + n,
            kv.capacity()
        );
    }
    let g = heads / kv_heads;
    let simd = Simd::detect(d);
    let mut out = vec![0f32; n * heads * d];
    #[cfg(target_arch = "x86_64")]
    if let Simd::Avx2 { chunks } = simd {
        // Too few (row, KV head) tasks to keep every thread busy (a decode step has one row):
        // split each row's keys and head_dim chunks across threads instead, with the same
        // kernels, so the bits do not change.
        let keys = start_pos + 1 - window.first_key(start_pos);
        if n * kv_heads < 2 * rayon::current_num_threads() && keys >= SPLIT_MIN_KEYS {
            for (row, o) in out.chunks_mut(heads * d).enumerate() {
                let pos = start_pos + row;
                let lo = window.first_key(pos);
                if window.scan_masked {
                    scan_split(q, (heads, kv_heads, n, row), lo, simd, kv);
                }
                let keys = (lo, pos + 1);
                split::split_row(q, heads, kv_heads, n, row, keys, chunks, kv, o);
            }
            return Ok(out);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if let Simd::Avx2 { chunks } = simd {
        if n >= 2 && crate::kernels::attention::prefill_tile::available() {
            let one = [(q, (n, start_pos), kv, window)];
            tiled(&one, heads, kv_heads, chunks, &mut out);
            return Ok(out);
        }
    }
    // out is [n, heads, d]; the g heads of KV head `kvh` are contiguous: one task each.
    out.par_chunks_mut(g * d).enumerate().for_each(|(idx, o)| {
        SCRATCH.with_borrow_mut(|(scratch, qg)| {
            let (row, kvh) = (idx / kv_heads, idx % kv_heads);
            qg.clear();
            for h in kvh * g..(kvh + 1) * g {
                qg.extend_from_slice(&q[(h * n + row) * d..][..d]);
            }
            attend_row(simd, qg, g, kv, kvh, (start_pos + row, window), scratch, o);
        })
    });
    Ok(out)
}

thread_local! {
    /// This thread's tile buffers: scratch, the tile's query vectors, its output.
    #[cfg(target_arch = "x86_64")]
    static TILE_SCRATCH: std::cell::RefCell<(crate::kernels::attention::prefill_tile::TileScratch, Vec<f32>, Vec<f32>)> =
        std::cell::RefCell::new(Default::default());
}

/// One sequence's query rows for [`tiled`]: `q` `[heads, n, head_dim]`, `n` rows from
/// position `start_pos`, its layer of the pool, the keys each row reads.
#[cfg(target_arch = "x86_64")]
type TiledSeq<'a, 'kv> = (&'a [f32], (usize, usize), &'a LayerKv<'kv>, Window);

/// The masked scan ([`Window::scan_masked`]) of one split decode row: per KV head, its
/// group's scores of keys `0 .. lo`, dropped.
#[cfg(target_arch = "x86_64")]
fn scan_split(
    q: &[f32],
    (heads, kv_heads, n, row): (usize, usize, usize, usize),
    lo: usize,
    simd: Simd,
    kv: &LayerKv,
) {
    let (d, g) = (kv.head_dim, heads / kv_heads);
    (0..kv_heads).into_par_iter().for_each(|kvh| {
        SCRATCH.with_borrow_mut(|(scratch, qg)| {
            qg.clear();
            for h in kvh * g..(kvh + 1) * g {
                qg.extend_from_slice(&q[(h * n + row) * d..][..d]);
            }
            scan_masked(simd, qg, g, kv, kvh, lo, scratch);
        })
    });
}

/// Attention for the rows of `seqs` (all with head_dim = 8 · `chunks`), into `out` (`[Σ n,
/// heads · head_dim]`, sequences in order): a sequence of several rows in tiles of
/// [`TILE_ROWS`](crate::kernels::attention::prefill_tile::TILE_ROWS) consecutive positions per KV
/// head ([`crate::kernels::attention::prefill_tile`]), a one-row sequence (a decode row) per KV head
/// through [`attend_group`], all in one parallel region. Each row's bits are its one-row
/// result either way.
#[cfg(target_arch = "x86_64")]
fn tiled(seqs: &[TiledSeq], heads: usize, kv_heads: usize, chunks: usize, out: &mut [f32]) {
    use crate::kernels::attention::prefill_tile::{attend_rows, TILE_ROWS};
    let d = 8 * chunks;
    let g = heads / kv_heads;
    // (sequence, its first output row, tile's first row, rows, KV head).
    let mut units = Vec::new();
    let mut base = 0;
    for (i, &(_, (n, _), _, _)) in seqs.iter().enumerate() {
        for r0 in (0..n).step_by(TILE_ROWS) {
            for kvh in 0..kv_heads {
                units.push((i, base, r0, TILE_ROWS.min(n - r0), kvh));
            }
        }
        base += n;
    }
    let dst = crate::kernels::OutPtr(out.as_mut_ptr());
    units.par_iter().for_each(|&(i, base, r0, rows, kvh)| {
        // The whole wrapper (Sync), not its pointer field.
        let dst: &crate::kernels::OutPtr = &dst;
        let (q, (n, start_pos), kv, window) = seqs[i];
        TILE_SCRATCH.with_borrow_mut(|(scratch, qt, ot)| {
            qt.clear();
            for r in r0..r0 + rows {
                for h in kvh * g..(kvh + 1) * g {
                    qt.extend_from_slice(&q[(h * n + r) * d..][..d]);
                }
            }
            ot.resize(rows * g * d, 0.0);
            let simd = Simd::Avx2 { chunks };
            if n == 1 {
                SCRATCH.with_borrow_mut(|(one, _)| {
                    attend_row(simd, qt, g, kv, kvh, (start_pos, window), one, ot)
                });
            } else {
                if window.scan_masked {
                    SCRATCH.with_borrow_mut(|(one, _)| {
                        for r in 0..rows {
                            let lo = window.first_key(start_pos + r0 + r);
                            scan_masked(simd, &qt[r * g * d..][..g * d], g, kv, kvh, lo, one);
                        }
                    });
                }
                // SAFETY: attention_rows::available() holds (the caller checked); head_dim =
                // 8·chunks, chunks in {4, 8, 12, 16, 24, 32, 72}; row r0 has start_pos + r0 + 1 ≥ 1
                // keys, the window is not 0 (paged_attention_in checked), and the last row's
                // position is within the table (checked by the caller).
                unsafe {
                    attend_rows(
                        chunks,
                        qt,
                        rows,
                        g,
                        kv,
                        kvh,
                        (start_pos + r0 + 1, window.size),
                        scratch,
                        ot,
                    )
                };
            }
            for r in 0..rows {
                // SAFETY: output row base + r0 + r, heads kvh·g .. (kvh + 1)·g: inside `out`
                // ([Σ n, heads, d]), and written by this task only.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        ot.as_ptr().add(r * g * d),
                        dst.0.add(((base + r0 + r) * heads + kvh * g) * d),
                        g * d,
                    )
                };
            }
        })
    });
}

/// One sequence's rows in a batched attention call ([`paged_attention_batch`]).
#[derive(Debug)]
pub struct AttnSeq<'q, 'kv> {
    /// `[heads, n, head_dim]` head-major, scaled by 1/√head_dim and rotated.
    pub q: &'q [f32],
    /// Query rows.
    pub n: usize,
    /// Position of the first row.
    pub start_pos: usize,
    /// This sequence's layer of the pool, through its own block table.
    pub kv: LayerKv<'kv>,
    /// The keys each row reads (the layer's sliding window, if any).
    pub window: Window,
}

/// [`paged_attention`] for the rows of several sequences at once (continuous batching), each
/// through its own block table and positions: one parallel region over every (sequence, row,
/// KV head) task, running the same kernel per task as [`paged_attention`], so each row's
/// result is bit-identical to running its sequence alone.
///
/// Returns `[Σ n, heads · head_dim]` row-major, sequences in order. Sequences of a rotated
/// KV dtype are rotated and rotated back as in [`paged_attention_in`].
///
/// Errors: as [`paged_attention`], for any sequence.
pub fn paged_attention_batch(seqs: &[AttnSeq], heads: usize, kv_heads: usize) -> Result<Vec<f32>> {
    if !seqs.iter().any(|s| s.kv.dtype.rotated()) {
        let qs: Vec<&[f32]> = seqs.iter().map(|s| s.q).collect();
        return attend_batch(seqs, &qs, heads, kv_heads);
    }
    let owned: Vec<Option<Vec<f32>>> = seqs
        .iter()
        .map(|s| {
            s.kv.dtype
                .rotated()
                .then(|| rotated_rows(s.q, s.kv.head_dim))
        })
        .collect();
    let qs: Vec<&[f32]> = seqs
        .iter()
        .zip(&owned)
        .map(|(s, o)| o.as_deref().unwrap_or(s.q))
        .collect();
    let mut out = attend_batch(seqs, &qs, heads, kv_heads)?;
    let mut at = 0;
    for s in seqs {
        let len = s.n * heads * s.kv.head_dim;
        if s.kv.dtype.rotated() {
            if let Some(rows) = out.get_mut(at..at + len) {
                rotate_rows(rows, s.kv.head_dim);
            }
        }
        at += len;
    }
    Ok(out)
}

/// [`paged_attention_batch`] on rows in the stored space: `qs[i]` is sequence i's query
/// (already rotated for a rotated dtype).
fn attend_batch(
    seqs: &[AttnSeq],
    qs: &[&[f32]],
    heads: usize,
    kv_heads: usize,
) -> Result<Vec<f32>> {
    if seqs.iter().any(|s| s.kv.masked.is_some()) {
        let all: Vec<masked::MaskedSeq> = seqs
            .iter()
            .zip(qs)
            .map(|(s, q)| (*q, (s.n, s.start_pos), &s.kv, s.window.size))
            .collect();
        return Ok(masked::attend(&all, heads, kv_heads));
    }
    if let ([one], [q]) = (seqs, qs) {
        return attend_in(
            q,
            heads,
            kv_heads,
            (one.n, one.start_pos),
            &one.kv,
            one.window,
        );
    }
    let Some(first) = seqs.first() else {
        return Ok(Vec::new());
    };
    let d = first.kv.head_dim;
    if qs.len() != seqs.len() {
        bail!("{} query arrays for {} sequences", qs.len(), seqs.len());
    }
    for (s, q) in seqs.iter().zip(qs) {
        if kv_heads == 0
            || !heads.is_multiple_of(kv_heads)
            || q.len() != heads * s.n * d
            || s.kv.head_dim != d
        {
            bail!("attention shapes disagree: q has {} values for {heads} heads × {} rows × {d}, {kv_heads} KV heads", q.len(), s.n);
        }
        if s.window.size == Some(0) {
            bail!("a sliding window of 0 tokens");
        }
        if s.start_pos + s.n > s.kv.capacity() {
            bail!(
                "attention past the block table: positions up to {} but room for {}",
                s.start_pos + s.n,
                s.kv.capacity()
            );
        }
    }
    let g = heads / kv_heads;
    let simd = Simd::detect(d);
    #[cfg(target_arch = "x86_64")]
    if let Simd::Avx2 { chunks } = simd {
        // A prompt chunk among the sequences: its rows in tiles.
        if seqs.iter().any(|s| s.n >= 2) && crate::kernels::attention::prefill_tile::available() {
            let all: Vec<TiledSeq> = seqs
                .iter()
                .zip(qs)
                .map(|(s, q)| (*q, (s.n, s.start_pos), &s.kv, s.window))
                .collect();
            let rows_total: usize = seqs.iter().map(|s| s.n).sum();
            let mut out = vec![0f32; rows_total * heads * d];
            tiled(&all, heads, kv_heads, chunks, &mut out);
            return Ok(out);
        }
    }
    // Task i: (sequence, row) of output row i / kv_heads, KV head i % kv_heads.
    let rows: Vec<(usize, usize)> = seqs
        .iter()
        .enumerate()
        .flat_map(|(i, s)| (0..s.n).map(move |r| (i, r)))
        .collect();
    let mut out = vec![0f32; rows.len() * heads * d];
    out.par_chunks_mut(g * d).enumerate().for_each(|(idx, o)| {
        SCRATCH.with_borrow_mut(|(scratch, qg)| {
            let ((si, row), kvh) = (rows[idx / kv_heads], idx % kv_heads);
            let (s, q) = (&seqs[si], qs[si]);
            qg.clear();
            for h in kvh * g..(kvh + 1) * g {
                qg.extend_from_slice(&q[(h * s.n + row) * d..][..d]);
            }
            let at = (s.start_pos + row, s.window);
            attend_row(simd, qg, g, &s.kv, kvh, at, scratch, o);
        })
    });
    Ok(out)
}

#[cfg(test)]
mod tests;
