//! The words for a job's state that the log, the REST API and the TUI share,
//! and the epoch-millisecond times every record carries.

use std::time::SystemTime;

/// A job's state as the list filters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting to be planned or scheduled.
    Queued,
    /// Running (live, or a `.running` log still being written).
    Running,
    /// Finished successfully.
    Completed,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
    /// A `.running` log nobody has written to for `--abandoned-after-seconds`.
    Abandoned,
}

impl JobState {
    /// Every state with its filter word, in the order of [`JobState::index`].
    pub const ALL: [(&'static str, JobState); 6] = [
        ("queued", JobState::Queued),
        ("running", JobState::Running),
        ("completed", JobState::Completed),
        ("failed", JobState::Failed),
        ("cancelled", JobState::Cancelled),
        ("abandoned", JobState::Abandoned),
    ];

    /// The position of this state in the counts `LogStore::counts` gives
    /// (queued, running, completed, failed, cancelled, abandoned).
    pub fn index(self) -> usize {
        match self {
            JobState::Queued => 0,
            JobState::Running => 1,
            JobState::Completed => 2,
            JobState::Failed => 3,
            JobState::Cancelled => 4,
            JobState::Abandoned => 5,
        }
    }

    /// The state at position `i` of [`JobState::index`] (the code the
    /// persistent index stores), if any.
    pub fn at_index(i: impl Into<usize>) -> Option<Self> {
        Self::ALL.get(i.into()).map(|(_, s)| *s)
    }

    /// The state a `status` word of the REST API names (case-insensitive);
    /// anything unknown counts as running.
    pub fn from_status_word(word: &str) -> Self {
        Self::ALL
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(word))
            .map(|(_, s)| *s)
            .unwrap_or(JobState::Running)
    }

    /// The `status` word the REST API uses for this state.
    pub fn status_word(self) -> &'static str {
        match self {
            JobState::Queued => "Queued",
            JobState::Running => "Running",
            JobState::Completed => "Completed",
            JobState::Failed => "Failed",
            JobState::Cancelled => "Cancelled",
            JobState::Abandoned => "Abandoned",
        }
    }

    /// Whether the job has not finished (its log is still `.running`).
    pub fn is_unfinished(self) -> bool {
        matches!(
            self,
            JobState::Queued | JobState::Running | JobState::Abandoned
        )
    }
}

/// Milliseconds since the Unix epoch (0 for times before it).
pub fn epoch_millis(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The time `millis` milliseconds after the Unix epoch: the inverse of
/// [`epoch_millis`].
pub fn time_of_millis(millis: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(millis)
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    epoch_millis(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_table_gives_each_state_its_index_word_and_code() {
        for (i, (word, state)) in JobState::ALL.iter().enumerate() {
            assert_eq!(state.index(), i);
            assert_eq!(JobState::at_index(i), Some(*state));
            assert!(state.status_word().eq_ignore_ascii_case(word));
        }
        assert_eq!(JobState::at_index(6usize), None);
    }
}
