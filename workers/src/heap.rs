//! The C allocator's settings for a compute process: freed memory stays
//! with the process, so a prefill's buffers of several MiB are used again
//! by the next layer and the next prompt instead of going back to the
//! kernel and coming back as fresh pages.
//!
//! glibc's malloc hands an allocation of 128 KiB and more (a threshold
//! that moves with use) to its own `mmap` and gives it back with `munmap`
//! when freed, and trims the free memory at the top of its heaps. A
//! prefill allocates and frees buffers of megabytes per layer (a 512-token
//! product's output, 1.5-8 MiB for the 0.5B fixture), so each came back as
//! new pages: about 45,000 page faults, 180 MB of pages zeroed, per
//! 256-token prefill, and with two threads each `munmap` also interrupted
//! the other CPU to flush its TLB. On a 2-core AMD EPYC VM, 0.5B f16,
//! 512-token prefill on 2 threads, four interleaved rounds: 108-120
//! tokens/s as it was, 112-133 with these settings; one thread unchanged.

/// Keeps allocations below 32 MiB (glibc's largest threshold) in the heap
/// and never trims freed memory from it. Call once, first thing in `main`,
/// before any thread starts. What is freed stays mapped for the next
/// allocation; the cost is the heap's fragments, which a stage gives back
/// after each batch ([`give_back_freed`]). Elsewhere than glibc it does
/// nothing.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        #[allow(unsafe_code)]
        // SAFETY: mallopt only sets the allocator's parameters; it is
        // called before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        }
    }
}

/// Gives the free memory inside the allocator's heaps back to the kernel:
/// the holes between allocations still in use (glibc's `malloc_trim`; the
/// free top of a thread's heap stays, for the next batch). A stage calls it
/// after a batch of several positions: the batch's buffers were used again
/// layer after layer, and kept past it, their holes add up as later
/// allocations land between them. On a 2-core AMD EPYC, 0.5B, two
/// 512-token prefills each followed by 32 decode steps, peak RSS over
/// weights and KV cache: q8_0 77 -> 38 MiB, q4_0 61 -> 33, q4_K_M 57 ->
/// 36; prefill tokens/s unchanged. Elsewhere than glibc it does nothing.
pub fn give_back_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        #[allow(unsafe_code)]
        // SAFETY: malloc_trim only returns free pages to the kernel; it
        // takes the allocator's locks like any allocation.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// Zeroed memory for weights that every token reads (the matrices a stage
/// packs at load), asked for in 2 MiB pages (`MADV_HUGEPAGE`): where the
/// kernel's transparent huge pages are `madvise` only (as on the VMs
/// measured), a heap allocation gets 4 KiB pages, and reading a gigabyte
/// of them each token walks the page tables a quarter of a million
/// times. On a 2-core AMD EPYC, 0.5B f16 (packed in pairs), 5
/// interleaved rounds: one-thread decode 26.5 -> 29.3 tok/s (llama.cpp
/// 29.6). A mapping of its own; where the mapping fails, the heap.
pub struct HugeBuffer(Storage);

enum Storage {
    Mapped(memmap2::MmapMut),
    Heap(Vec<u8>),
}

impl HugeBuffer {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> HugeBuffer {
        match memmap2::MmapMut::map_anon(len) {
            Ok(map) => {
                // Before any page is touched, so that the first touch
                // faults in a huge page. Only advice: ignored where the
                // kernel has no huge pages.
                #[cfg(target_os = "linux")]
                let _ = map.advise(memmap2::Advice::HugePage);
                HugeBuffer(Storage::Mapped(map))
            }
            Err(_) => HugeBuffer(Storage::Heap(vec![0; len])),
        }
    }
}

impl std::ops::Deref for HugeBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Storage::Mapped(m) => m,
            Storage::Heap(v) => v,
        }
    }
}

impl std::ops::DerefMut for HugeBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Storage::Mapped(m) => m,
            Storage::Heap(v) => v,
        }
    }
}
