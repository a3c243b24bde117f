//! `heap::HugeBuffer`, the memory of packed weights: zeroed, writable, and
//! a mapping advised for huge pages (the `hg` flag the kernel shows for it
//! in `/proc/self/smaps`; the heap never has it), whether or not the
//! kernel then finds a huge page for it.

#![cfg(target_os = "linux")]

use workers::heap::HugeBuffer;

/// The `VmFlags` of the mapping that holds `addr`.
fn vm_flags(addr: usize) -> Vec<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((lo, hi)) = range.split_once('-')
            && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        {
            inside = (lo..hi).contains(&addr);
        } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
            return flags.split_whitespace().map(str::to_owned).collect();
        }
    }
    panic!("no mapping holds {addr:#x}");
}

#[test]
fn packed_weights_live_in_a_zeroed_mapping_advised_for_huge_pages() {
    let len = 6 << 20;
    let mut buf = HugeBuffer::zeroed(len);
    assert_eq!(buf.len(), len);
    assert!(buf.iter().all(|&b| b == 0), "fresh bytes are zero");
    for (i, page) in buf.chunks_mut(4096).enumerate() {
        page[0] = i as u8;
    }
    assert_eq!(buf[4096 * 3], 3);
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
        // A kernel built without transparent huge pages refuses the
        // advice; the buffer is then plain memory, as checked above.
        return;
    }
    let flags = vm_flags(buf.as_ptr() as usize);
    assert!(
        flags.iter().any(|f| f == "hg"),
        "the mapping is not advised for huge pages: {flags:?}"
    );
}
