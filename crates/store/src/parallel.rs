//! Reading many logs at once: a pass's new logs on a few threads.

use std::sync::atomic::Ordering;

/// Threads reading new logs of an object store at once.
pub(crate) const REMOTE_READERS: usize = 16;

/// New local logs from which a rescan reads in parallel.
pub(crate) const PARALLEL_FROM: usize = 32;

/// Threads reading new local logs at once: two per core (so one reads
/// while the other parses), at least 4, at most 32.
pub(crate) fn local_readers() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (cores * 2).clamp(4, 32)
}

/// `f` over `items` on up to `threads` threads, results in order.
pub(crate) fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(items.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            return mine;
                        };
                        mine.push((i, f(item)));
                    }
                })
            })
            .collect();
        for worker in workers {
            for (i, r) in worker.join().expect("a reader thread") {
                out[i] = Some(r);
            }
        }
    });
    out.into_iter()
        .map(|r| r.expect("every item is read"))
        .collect()
}
