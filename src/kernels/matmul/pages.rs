//! The big buffers a load fills: on transparent huge pages where Linux allows it, and
//! filled on every thread. A 12 GB model repacked into 4 KiB pages took ~3 million page
//! faults, each zeroing its page on one thread, and the kernel's share of a load was ~4× our
//! own (measured: docs/benchmarks.md, "Loading a mixture of experts"); with
//! `MADV_HUGEPAGE` (`/sys/kernel/mm/transparent_hugepage/enabled` is often `madvise`) a
//! fault maps 2 MiB.
use rayon::prelude::*;

/// 2 MiB, the x86-64 transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

/// A vector of `len` copies of `value` (as [`built`]).
pub fn filled<T: Clone + Send + Sync>(len: usize, value: T) -> Vec<T> {
    built(len, |_| value.clone())
}

/// The vector `[f(0), f(1), …, f(len − 1)]`, its memory advised as huge pages (the whole
/// 2 MiB pages inside it) before anything touches it, and written in parallel.
pub fn built<T: Send>(len: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(len);
    advise_huge(v.as_mut_ptr().cast(), len * std::mem::size_of::<T>());
    // An indexed iterator writes straight into the reserved capacity, each thread its part.
    v.par_extend((0..len).into_par_iter().map(f));
    v
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
    fn filled_holds_len_copies() {
        for len in [0, 1, 7, (3 << 20) + 5] {
            let v = super::filled(len, [3u16, 9]);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|x| *x == [3, 9]));
        }
        assert_eq!(super::built(5, |i| i * i), [0, 1, 4, 9, 16]);
    }
}
