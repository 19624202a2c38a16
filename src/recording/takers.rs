//! Several takers of the writer's completed jobs (the SQL tables'
//! columnar history and the trace exporter), behind the one
//! [`WrittenJobs`] the writer hands jobs to.

use crate::format::record::WrittenJob;
use crate::recording::writer::WrittenJobs;
use std::sync::Arc;

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
