//! The writer's hand-over: the records of a job whose log completed go to
//! whoever takes them (the SQL tables' columnar history, the trace
//! exporter) through [`WrittenJobs`], so the layers above the writer
//! receive them without the writer knowing them; [`Takers`] puts several
//! takers behind the one the writer holds.

use crate::record::WrittenJob;
use std::sync::Arc;

/// Takes the records of jobs whose logs completed (the SQL tables'
/// columnar history builds its rows from them instead of reading the logs
/// again; the trace exporter its spans). Called on the writer thread: both
/// calls must be quick.
pub trait WrittenJobs: Send + Sync + std::fmt::Debug {
    /// Whether the records of a job whose log opens now are wanted.
    fn wanted(&self) -> bool;
    /// The records of a job whose log is now complete and durable, shared
    /// (several takers hold the one copy).
    fn completed(&self, job: Arc<WrittenJob>);
}

/// Several takers of written jobs: a job is wanted when one of them wants
/// it, and each is handed the same shared records.
#[derive(Debug)]
pub struct Takers(pub Vec<Arc<dyn WrittenJobs>>);

impl WrittenJobs for Takers {
    fn wanted(&self) -> bool {
        self.0.iter().any(|t| t.wanted())
    }

    fn completed(&self, job: Arc<WrittenJob>) {
        for taker in &self.0 {
            taker.completed(job.clone());
        }
    }
}
