//! Giving the allocator's slack back after a large pass.
//!
//! A rescan of many new logs reads them on several threads and frees large
//! temporary buffers (the listing, the stamps, the results). glibc's
//! allocator answers the free of each large buffer by raising the size
//! below which it keeps freed memory at the top of a thread's heap (its
//! dynamic mmap and trim thresholds, up to 64 MiB a heap), so after the
//! first rescan of a 100,000-log directory about half of the growth in
//! resident memory was freed memory held (measured: 518 bytes a job, 283
//! with the dynamic thresholds off; `docs/performance.md`).
//! [`release_slack`] asks glibc for every free page back (`malloc_trim`),
//! once, after a pass that read at least [`SLACK_AFTER_LOGS`] logs or
//! loaded the persistent index: a quiescent point, where the walk over
//! the heaps costs little next to the pass.
//!
//! This is the workspace's one `unsafe` (a foreign call with no
//! preconditions). No crate offers it safely; the tidy test
//! `the_one_foreign_call_stays_in_its_file` keeps it the only one. On
//! other C libraries it does nothing.

/// A pass reading at least this many logs gives the slack back after it.
pub const SLACK_AFTER_LOGS: usize = 1_000;

/// Returns freed heap memory to the system; true when some was returned.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn release_slack() -> bool {
    // SAFETY: `malloc_trim` takes a padding size and touches only the
    // allocator's own free lists, under its own locks.
    unsafe { libc::malloc_trim(0) != 0 }
}

/// Returns freed heap memory to the system: nothing to do off glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_slack() -> bool {
    false
}
