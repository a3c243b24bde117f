//! `heap::keep_freed_memory`: buffers of megabytes, freed and allocated
//! again, reuse the same pages instead of faulting in new ones, until
//! `heap::give_back_freed` returns them. Its own test binary: the
//! allocator's settings are the whole process's.

// Only glibc has the settings (elsewhere the call does nothing).
#![cfg(all(target_os = "linux", target_env = "gnu"))]
#![allow(unsafe_code)]

/// Minor page faults of the calling thread so far.
fn faults() -> i64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes the struct it is given.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage");
    // SAFETY: initialised by the successful call above.
    unsafe { usage.assume_init() }.ru_minflt
}

/// Allocates `mib` MiB, writes every page and frees it; the faults taken.
fn touch(mib: usize) -> i64 {
    let before = faults();
    let mut v = vec![1u8; mib << 20];
    for page in v.chunks_mut(4096) {
        page[0] = 2;
    }
    std::hint::black_box(&v);
    drop(v);
    faults() - before
}

#[test]
fn freed_buffers_come_back_without_page_faults() {
    workers::heap::keep_freed_memory();
    // The pattern of a prefill: a large buffer, a smaller one, the large
    // one again. glibc's defaults map the first large one for itself and
    // unmap it when freed, so the second comes back as new pages.
    let first = touch(24);
    let small = touch(8);
    let again = touch(24);
    let pages = (24 << 20) / 4096;
    assert!(
        first > pages / 2,
        "the first use faults its pages in ({first})"
    );
    assert!(
        small + again < pages / 20,
        "freed memory is used again: {small} + {again} faults for {pages} pages"
    );
    // What a batch leaves behind: a large buffer freed below one still
    // in use, a hole in the heap. Kept, the next large buffer takes its
    // pages as they are; given back (as a stage does after a batch), its
    // pages fault in again.
    let kept = hole_then(24, || {});
    let given_back = hole_then(24, workers::heap::give_back_freed);
    assert!(kept < pages / 20, "the hole is used again ({kept} faults)");
    assert!(
        given_back > pages / 2,
        "the hole went back to the kernel ({given_back} faults for {pages} pages)"
    );
}

/// Leaves a hole of `mib` MiB in the heap (a buffer freed below a small
/// one still allocated), runs `between`, and returns the faults of a
/// buffer of the same size written after it.
fn hole_then(mib: usize, between: impl FnOnce()) -> i64 {
    let mut hole = vec![1u8; mib << 20];
    for page in hole.chunks_mut(4096) {
        page[0] = 2;
    }
    std::hint::black_box(&hole);
    // Larger than any free chunk but the top: it is carved above the hole.
    let above = std::hint::black_box(vec![3u8; 1 << 20]);
    drop(hole);
    between();
    let faults = touch(mib);
    drop(above);
    faults
}
