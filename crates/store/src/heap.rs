//! The allocator's thresholds, fixed for the process the store lives in.
//!
//! A rescan of many new logs reads them on several threads and frees
//! large temporary buffers (the listing, the stamps, the results). glibc's
//! allocator answers the free of each large buffer by raising the size
//! below which it serves allocations from its heaps and the size of free
//! memory it keeps at a heap's top (its dynamic mmap and trim thresholds,
//! up to 32 and 64 MiB). The store's summaries, allocated among those
//! buffers, then sit on pages that cannot be given back: after the first
//! rescan of 100,000 logs, 518 bytes of resident memory a job; a
//! `malloc_trim` after the pass still left 295-420. With the thresholds
//! fixed (128 KiB to 32 MiB measured, 4 MiB chosen), 250-290
//! (`docs/performance.md`, the scale bench's memory rows).
//!
//! [`fix_thresholds`] sets the mmap threshold to [`MMAP_THRESHOLD`] once
//! per process (`mallopt(M_MMAP_THRESHOLD)`, which also keeps glibc's
//! default 128 KiB trim threshold and turns the dynamic adjustment off):
//! larger blocks are mapped and unmapped on their own, smaller ones come
//! from the heaps as before. [`crate::LogStore::new`] calls it, so every
//! process that indexes logs (the binary, an embedding scheduler, the
//! benches) runs with it. `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=N`
//! in the environment sets another value and is left alone.
//!
//! This is the workspace's one `unsafe` (a foreign call with no
//! preconditions). No crate offers it safely; the tidy test
//! `the_one_foreign_call_stays_in_its_file` keeps it the only one. On
//! other C libraries it does nothing.

/// Blocks of this size and more are mapped on their own (4 MiB).
pub const MMAP_THRESHOLD: i32 = 4 << 20;

/// Fixes the allocator's thresholds, once per process; true when this
/// call set them.
pub fn fix_thresholds() -> bool {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let mut set = false;
    ONCE.call_once(|| {
        let tuned = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("mmap_threshold"));
        set = !tuned && set_mmap_threshold(MMAP_THRESHOLD);
    });
    set
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set_mmap_threshold(bytes: i32) -> bool {
    // SAFETY: `mallopt` takes two integers and changes only the
    // allocator's own parameters, under its own lock.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_mmap_threshold(_bytes: i32) -> bool {
    false
}
