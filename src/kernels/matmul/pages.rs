//! The big buffers a load fills: on transparent huge pages where Linux allows it, each
//! value written once, in its final place, on every thread. A 12 GB model repacked into
//! 4 KiB pages took ~3 million page faults, each zeroing its page on one thread, and the
//! kernel's share of a load was ~4× our own (measured: docs/benchmarks.md, "Loading a
//! mixture of experts"); with `MADV_HUGEPAGE` (`/sys/kernel/mm/transparent_hugepage/enabled`
//! is often `madvise`) a fault maps 2 MiB.
use rayon::prelude::*;

/// 2 MiB, the x86-64 transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

/// Two vectors of `groups · per_a` and `groups · per_b` values made group by group on every
/// thread: group `g`'s two runs (`[g · per_a, (g + 1) · per_a)` and the like) start as
/// `T::default()` and `f(g, a_run, b_run)` fills them while they are still in the cache. One
/// pass over fresh memory, its first touch included; a vector of defaults filled afterwards
/// is written twice. Memory advised as huge pages. Panics when `per_a` or
/// `per_b` is 0 with `groups` > 0.
pub fn grouped<A: Default + Send, B: Default + Send>(
    groups: usize,
    (per_a, per_b): (usize, usize),
    f: impl Fn(usize, &mut [A], &mut [B]) + Sync + Send,
) -> (Vec<A>, Vec<B>) {
    let (mut a, mut b) = (fresh::<A>(groups * per_a), fresh::<B>(groups * per_b));
    if groups > 0 {
        a.spare_capacity_mut()[..groups * per_a]
            .par_chunks_mut(per_a)
            .zip(b.spare_capacity_mut()[..groups * per_b].par_chunks_mut(per_b))
            .enumerate()
            .for_each(|(g, (ra, rb))| f(g, defaults(ra), defaults(rb)));
    }
    // SAFETY: every group's runs were written in full by `defaults` (then changed by `f`),
    // and the runs cover both vectors' first `groups · per` slots.
    unsafe {
        a.set_len(groups * per_a);
        b.set_len(groups * per_b);
    }
    (a, b)
}

/// A vector of `len` values made `run` at a time on every thread: run `i` (values
/// `[i · run, min((i + 1) · run, len))`, the last one shorter where `run` does not divide
/// `len`) starts as `T::default()` and `f(i, run)` fills it while it is still in the cache.
/// One pass over fresh memory, as [`grouped`]. Panics when `run` is 0 with `len` > 0.
pub fn in_runs<T: Default + Send>(
    len: usize,
    run: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) -> Vec<T> {
    let mut v = fresh::<T>(len);
    if len > 0 {
        v.spare_capacity_mut()[..len]
            .par_chunks_mut(run)
            .enumerate()
            .for_each(|(i, r)| f(i, defaults(r)));
    }
    // SAFETY: the runs cover the first `len` slots, each written in full by `defaults`.
    unsafe { v.set_len(len) };
    v
}

/// Index of the first `block_bytes`-byte block of `data` for which `bad` holds, looked for
/// on every thread, a tight loop over each thread's share (a load's check of every block's
/// scale, one pass over a tensor that was one thread's while the other idled).
pub fn first_block(
    data: &[u8],
    block_bytes: usize,
    bad: impl Fn(&[u8]) -> bool + Sync + Send,
) -> Option<usize> {
    const SHARE: usize = 1 << 14;
    data.par_chunks(SHARE * block_bytes.max(1))
        .enumerate()
        .find_map_first(|(i, part)| {
            let at = part.chunks_exact(block_bytes.max(1)).position(&bad)?;
            Some(i * SHARE + at)
        })
}

/// An empty vector with room for `len` values, advised as huge pages.
fn fresh<T>(len: usize) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(len);
    advise_huge(v.as_mut_ptr().cast(), len * std::mem::size_of::<T>());
    v
}

/// Write `T::default()` into every slot of `run` and view it as initialized.
fn defaults<T: Default>(run: &mut [std::mem::MaybeUninit<T>]) -> &mut [T] {
    for slot in run.iter_mut() {
        slot.write(T::default());
    }
    // SAFETY: every slot was just written; MaybeUninit<T> has T's layout.
    unsafe { &mut *(run as *mut [std::mem::MaybeUninit<T>] as *mut [T]) }
}

/// Ask Linux to back the whole 2 MiB pages of `[start, start + bytes)` with transparent
/// huge pages. A hint: refused (another OS, THP `never`) it changes nothing.
fn advise_huge(start: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        let first = (start as usize).next_multiple_of(HUGE_PAGE);
        let end = (start as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end > first {
            // SAFETY: [first, end) lies inside the caller's allocation; MADV_HUGEPAGE only
            // changes how the kernel backs the range, never what it holds.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, bytes, HUGE_PAGE);
}

#[cfg(test)]
mod tests {
    #[test]
    fn grouped_starts_each_run_at_defaults_and_keeps_group_order() {
        let (a, b) = super::grouped(3, (4, 2), |g, ra: &mut [u32], rb: &mut [u8]| {
            assert!(ra.iter().all(|x| *x == 0) && rb.iter().all(|x| *x == 0));
            ra[1] = 7 + g as u32;
            rb[0] = rb.len() as u8 + g as u8;
        });
        assert_eq!(a, [0, 7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0]);
        assert_eq!(b, [2, 0, 3, 0, 4, 0]);
        let (a, b) = super::grouped::<u8, u8>(0, (0, 0), |_, _, _| unreachable!());
        assert!(a.is_empty() && b.is_empty());
    }

    #[test]
    fn in_runs_fills_each_run_and_a_short_last_one() {
        let v = super::in_runs(7, 3, |i, run: &mut [u16]| {
            assert!(run.iter().all(|x| *x == 0));
            run[run.len() - 1] = 10 + i as u16;
        });
        assert_eq!(v, [0, 0, 10, 0, 0, 11, 12]);
        assert!(super::in_runs::<u8>(0, 0, |_, _| unreachable!()).is_empty());
    }

    #[test]
    fn first_block_is_the_first_across_shares() {
        let mut data = vec![0u8; 3 * 40_000];
        assert_eq!(super::first_block(&data, 3, |b| b[0] == 9), None);
        for at in [39_999, 20_000, 16_385, 16_384, 5] {
            data[3 * at] = 9;
            assert_eq!(super::first_block(&data, 3, |b| b[0] == 9), Some(at));
        }
        // A partial block at the end is not a block.
        data = vec![0u8; 7];
        data[6] = 9;
        assert_eq!(super::first_block(&data, 3, |b| b[0] == 9), None);
    }
}
