//! The ids of the completed jobs added to or removed from the store since
//! a position, so that a reader keeping a copy of the set (the columnar
//! history's index) reads what changed rather than every job again.
//!
//! Every change of the set notes the id: a job taken in
//! (`Catalog::insert`, which a replacement goes through too), forgotten
//! (`Catalog::remove`, `LogStore::cold_hide`). A
//! move to the segments removes jobs from the catalog and adds them to the
//! segments at once: their ids are noted (by the removal) and are still
//! listed, which a reader finds unchanged. A change in bulk (the catalog
//! filled from the persistent index, emptied because the directory cannot
//! be listed) is not noted job by job: it ends the journal
//! (`Journal::overflow`), and a reader behind it reads every job again.
//! So does falling more than [`CAP`] changes behind.
//!
//! **Invariant:** for a position `p` a reader was given, the ids of every
//! job whose membership changed since `p` are among those
//! `Journal::since` gives, or it gives `None`.
//!
//! The columnar history keeps one of its own, of the jobs whose index
//! rows (their task totals) changed, for the SQL `jobs` table built on
//! both.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

/// Changes kept at most (about 40 bytes each).
#[cfg(not(test))]
pub const CAP: usize = 65_536;
#[cfg(test)]
pub const CAP: usize = 64;

/// The changes noted, the oldest first.
#[derive(Debug, Default)]
pub struct Journal {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The position of the first id kept.
    start: u64,
    ids: VecDeque<Arc<str>>,
}

impl Inner {
    fn end(&self) -> u64 {
        self.start + self.ids.len() as u64
    }
}

impl Journal {
    /// A job `id` was added or removed.
    pub fn note(&self, id: &str) {
        let mut inner = self.inner.lock();
        inner.ids.push_back(id.into());
        if inner.ids.len() > CAP {
            inner.ids.pop_front();
            inner.start += 1;
        }
    }

    /// The set changed in bulk: a reader at any position given so far
    /// reads every job again.
    pub fn overflow(&self) {
        let mut inner = self.inner.lock();
        inner.start = inner.end() + 1;
        inner.ids.clear();
    }

    /// The position after the last change noted.
    pub fn position(&self) -> u64 {
        self.inner.lock().end()
    }

    /// The ids changed since `at` (sorted, each once) and the position
    /// after them; `None` when they are not all kept.
    pub fn since(&self, at: u64) -> Option<(Vec<String>, u64)> {
        let inner = self.inner.lock();
        if at < inner.start || at > inner.end() {
            return None;
        }
        let from = (at - inner.start) as usize;
        let mut ids: Vec<String> = (inner.ids.range(from..)).map(|id| id.to_string()).collect();
        ids.sort_unstable();
        ids.dedup();
        Some((ids, inner.end()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gets_what_was_noted_after_it_or_nothing() {
        let j = Journal::default();
        let at = j.position();
        j.note("b");
        j.note("a");
        j.note("b");
        let (ids, end) = j.since(at).unwrap();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(j.since(end).unwrap().0, Vec::<String>::new());
        j.note("c");
        assert_eq!(j.since(end).unwrap().0, ["c"]);
        // A change in bulk: every position given so far is behind.
        j.overflow();
        assert!(j.since(end).is_none() && j.since(at).is_none());
        let after = j.position();
        j.note("d");
        assert_eq!(j.since(after).unwrap().0, ["d"]);
        // Past the cap, the oldest positions fall behind.
        for i in 0..CAP {
            j.note(&format!("x{i}"));
        }
        assert!(j.since(after).is_none());
        assert_eq!(j.since(j.position() - 1).unwrap().0.len(), 1);
        // A position never given (ahead of the end) is refused.
        assert!(j.since(j.position() + 1).is_none());
    }
}
