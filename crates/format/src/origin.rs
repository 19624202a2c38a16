//! Whose a job is: the history's own, or a user's. The history's own jobs
//! are those its SQL cluster engine submits, named
//! [`HISTORY_JOB_PREFIX`]`: <the query's first line>`: they are recorded
//! like any job (the cluster did the work), marked in the list
//! (`origin: "history"`), and kept apart from a user's work: usage
//! attributes them no idle time (their busy time is one group of its
//! own, [`HISTORY_GROUP`]), and the recurring queries and the what-if
//! pairs leave them out unless asked for.
//!
//! The name is the mark (the log records nothing else the engine could
//! set): a user who names a job so is counted with the history's jobs, in
//! a group everyone sees, so nothing is hidden by it.

/// The start of the name of every job the history's SQL engine submits.
pub const HISTORY_JOB_PREFIX: &str = "history SQL";
/// The list's `origin` of the history's own jobs.
pub const HISTORY: &str = "history";
/// The usage group of the history's own jobs, whatever the grouping.
pub const HISTORY_GROUP: &str = "(history)";

/// Whether a job named `job_name` is the history's own.
pub fn is_history(job_name: &str) -> bool {
    job_name
        .strip_prefix(HISTORY_JOB_PREFIX)
        .is_some_and(|rest| rest.starts_with(':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_s_jobs_are_told_by_their_name_and_nothing_looser() {
        assert!(is_history("history SQL: SELECT count(*) FROM jobs"));
        assert!(!is_history("history SQL"));
        assert!(!is_history("history SQLite export"));
        assert!(!is_history("nightly history SQL: x"));
        assert!(!is_history(""));
    }
}
