//! Query labels (see `bjh_format::label`) by query hash: one per query,
//! shared by all its runs, so a label costs memory per distinct query and
//! not per job, and a later run of a query labels the runs before it whose
//! logs did not say.
//!
//! Labels are learnt where a log is summarized: from its footer's
//! `query_label`, else from its logical plan when the summary read it
//! (logs without a footer, footers written before the field). The
//! persistent index keeps them with the jobs. The first label learnt for a
//! hash stays; like the hash itself, it is taken as the log states it. At
//! most [`MAX_LABELS`] queries are labelled; past that a new query shows
//! its hash alone.

use parking_lot::{RwLock, RwLockReadGuard};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// Distinct queries labelled at most.
pub const MAX_LABELS: usize = 1 << 17;

/// Hash to label; an empty label: the plan was read and names nothing.
static LABELS: LazyLock<RwLock<HashMap<u64, Arc<str>>>> = LazyLock::new(Default::default);

/// Records `label` (`None`: the plan names nothing a label shows) as the
/// label of the query `hash` (0, no query, is ignored), unless it has
/// one. A label is cut to `bjh_format::label::MAX_LABEL_CHARS` characters
/// (a footer may state anything).
pub fn remember(hash: u64, label: Option<&str>) {
    if hash == 0 || LABELS.read().contains_key(&hash) {
        return;
    }
    let label = label.unwrap_or("");
    let max = bjh_format::label::MAX_LABEL_CHARS;
    let label: Arc<str> = match label.char_indices().nth(max) {
        Some((at, _)) => Arc::from(format!("{}…", &label[..at])),
        None => Arc::from(label),
    };
    let mut labels = LABELS.write();
    if labels.len() < MAX_LABELS {
        labels.entry(hash).or_insert(label);
    }
}

/// Whether the query `hash` has been looked at (labelled, or known to
/// have no label), so its plan need not be read again for it.
pub fn known(hash: u64) -> bool {
    LABELS.read().contains_key(&hash)
}

/// The label of the query `hash`, when it has one.
pub fn get(hash: u64) -> Option<Arc<str>> {
    LABELS.read().get(&hash).filter(|l| !l.is_empty()).cloned()
}

/// All labels, read under one lock (a page of entries takes it once).
pub fn all() -> Labels {
    Labels(LABELS.read())
}

/// The labels as read by [`all`]; hold it briefly.
pub struct Labels(RwLockReadGuard<'static, HashMap<u64, Arc<str>>>);

impl Labels {
    /// The label of the query `hash`, when it has one.
    pub fn get(&self, hash: u64) -> Option<&str> {
        self.0.get(&hash).map(|l| &**l).filter(|l| !l.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_label_stays_none_is_remembered_and_long_ones_are_cut() {
        remember(0xfeed_0001, Some("t · sort"));
        remember(0xfeed_0001, Some("another"));
        assert_eq!(get(0xfeed_0001).as_deref(), Some("t · sort"));
        assert!(!known(0xfeed_0002));
        remember(0xfeed_0002, None);
        assert!(known(0xfeed_0002));
        assert_eq!(get(0xfeed_0002), None);
        assert_eq!(all().get(0xfeed_0002), None);
        remember(0xfeed_0003, Some(&"ü".repeat(1_000)));
        let cut = get(0xfeed_0003).unwrap();
        assert_eq!(cut.chars().count(), bjh_format::label::MAX_LABEL_CHARS + 1);
        remember(0, Some("nothing"));
        assert!(!known(0));
    }
}
