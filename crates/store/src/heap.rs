//! The allocator, kept from holding freed memory for the process the store
//! lives in.
//!
//! A rescan of many new logs reads them on several threads and frees
//! large temporary buffers (the listing, the stamps, the results). glibc's
//! allocator answers the free of each large buffer by raising the size
//! below which it serves allocations from its heaps and the size of free
//! memory it keeps at a heap's top (its dynamic mmap and trim thresholds,
//! up to 32 and 64 MiB). The store's summaries, allocated among those
//! buffers, then sit on pages that cannot be given back: after the first
//! rescan of 100,000 logs, 518 bytes of resident memory a job: a
//! `malloc_trim` after the pass alone left 295-420, the thresholds fixed
//! alone 300-350, both 255-260 (`docs/performance.md`, the scale bench's
//! memory rows). A trim threshold raised with the mmap one (so a heap
//! keeps up to 32 MiB free at its top) gave 370-415: it is left at
//! glibc's 128 KiB.
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
//! [`release_slack`] then asks for every free page back (`malloc_trim`)
//! after a pass that read at least [`SLACK_AFTER_LOGS`] logs and after
//! the persistent index is loaded: quiescent points, where the walk over
//! the heaps costs little next to the pass.
//!
//! These are the workspace's only `unsafe` blocks (two foreign calls
//! with no preconditions). No crate offers them safely; the tidy test
//! `the_foreign_calls_stay_in_their_file` keeps them the only ones. On
//! other C libraries they do nothing.

/// Blocks of this size and more are mapped on their own: 32 MiB, the
/// most glibc allows, so a large answer built again and again (a 10 MB
/// `/stages`) comes from a heap rather than a fresh mapping each time
/// (measured: 2.7 ms a request, against 11 ms at 4 MiB).
pub const MMAP_THRESHOLD: i32 = 32 << 20;

/// Fixes the allocator's thresholds, once per process.
pub fn fix_thresholds() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let tuned = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("mmap_threshold"));
        if !tuned {
            set_mmap_threshold(MMAP_THRESHOLD);
        }
    });
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set_mmap_threshold(bytes: i32) {
    // SAFETY: `mallopt` takes two integers and changes only the
    // allocator's own parameters, under its own lock.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_mmap_threshold(_bytes: i32) {}

/// A pass reading at least this many logs gives the slack back after it.
pub const SLACK_AFTER_LOGS: usize = 1_000;

/// Returns freed heap memory to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn release_slack() {
    // SAFETY: `malloc_trim` takes a padding size and touches only the
    // allocator's own free lists, under its own locks.
    unsafe { libc::malloc_trim(0) };
}

/// Returns freed heap memory to the system: nothing to do off glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_slack() {}
