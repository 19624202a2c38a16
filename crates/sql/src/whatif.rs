//! The `whatif` table: the what-if replay's predictions for the newest
//! completed run of each recurring query, at its own shape and at a few
//! others, so that "which recurring queries would gain most from two more
//! executors" is one query:
//!
//! ```sql
//! SELECT query_label, observed_ms - predicted_ms AS saving_ms
//! FROM whatif
//! WHERE executors = observed_executors + 2 AND slots = observed_slots
//! ORDER BY saving_ms DESC
//! ```
//!
//! And the `whatif_pairs` table: the history grading itself, each pair of
//! consecutive completed runs of one query with the earlier run's replay
//! on the later run's shape beside what the later run took (the pairs
//! `GET /api/whatif/accuracy` grades).
//!
//! The rows are worked out by the server (serving's replay, over the logs
//! it reads) and sent to the worker like the `jobs` rows
//! ([`crate::OtherJobs::whatif`], [`crate::OtherJobs::whatif_pairs`]);
//! this module holds their schemas and their Arrow encoding only.

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Int64Builder, RecordBatch, StringViewBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::sync::{Arc, LazyLock};

/// The most recurring queries (the most recently run first) the table
/// holds: each is one log read and replayed per query.
pub const MAX_QUERIES: usize = 100;

/// One prediction: a run replayed on one shape.
#[derive(Debug, Clone, PartialEq)]
pub struct WhatIfRow {
    /// The query hash (16 hex digits).
    pub query_hash: String,
    /// The query's label, when it has one.
    pub query_label: Option<String>,
    /// The run replayed (the query's newest completed run).
    pub job_id: String,
    /// The scheduler that ran it.
    pub scheduler_id: Option<String>,
    /// The shape it ran on.
    pub observed_executors: u32,
    /// Slots on each of its executors.
    pub observed_slots: u32,
    /// Whether that shape was inferred from its tasks (not recorded).
    pub shape_inferred: bool,
    /// The shape replayed.
    pub executors: u32,
    /// Slots on each executor replayed.
    pub slots: u32,
    /// What the run took, start to end (ms).
    pub observed_ms: u64,
    /// The replay on the shape it ran on (its difference from
    /// `observed_ms` is the model's error on this run).
    pub replayed_ms: u64,
    /// The replay on this row's shape.
    pub predicted_ms: u64,
    /// No slot ever waited for.
    pub critical_path_ms: u64,
    /// All task time spread evenly over this row's slots.
    pub ideal_ms: u64,
}

/// A column of never-null milliseconds or counts.
fn int(name: &str) -> Field {
    Field::new(name, DataType::Int64, false)
}

/// `whatif`'s schema.
pub static WHATIF: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("query_hash", DataType::Utf8View, false),
        Field::new("query_label", DataType::Utf8View, true),
        Field::new("job_id", DataType::Utf8View, false),
        Field::new("scheduler_id", DataType::Utf8View, true),
        int("observed_executors"),
        int("observed_slots"),
        Field::new("shape_inferred", DataType::Boolean, false),
        int("executors"),
        int("slots"),
        int("observed_ms"),
        int("replayed_ms"),
        int("predicted_ms"),
        int("critical_path_ms"),
        int("ideal_ms"),
    ]))
});

/// The shapes each run is replayed on: its own, one, two and twice as
/// many executors, and twice the slots on each; each once.
pub fn shapes(executors: u32, slots: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for shape in [
        (executors, slots),
        (executors + 1, slots),
        (executors + 2, slots),
        (executors.saturating_mul(2), slots),
        (executors, slots.saturating_mul(2)),
    ] {
        if !out.contains(&shape) {
            out.push(shape);
        }
    }
    out
}

/// `rows` as one batch of [`WHATIF`].
pub fn whatif_batch(rows: &[WhatIfRow]) -> RecordBatch {
    let mut text: [StringViewBuilder; 4] = Default::default();
    let mut ints: [Int64Builder; 9] = Default::default();
    let mut inferred = BooleanBuilder::new();
    let big = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    for r in rows {
        text[0].append_value(&r.query_hash);
        text[1].append_option(r.query_label.as_deref());
        text[2].append_value(&r.job_id);
        text[3].append_option(r.scheduler_id.as_deref());
        inferred.append_value(r.shape_inferred);
        let values = [
            u64::from(r.observed_executors),
            u64::from(r.observed_slots),
            u64::from(r.executors),
            u64::from(r.slots),
            r.observed_ms,
            r.replayed_ms,
            r.predicted_ms,
            r.critical_path_ms,
            r.ideal_ms,
        ];
        for (b, v) in ints.iter_mut().zip(values) {
            b.append_value(big(v));
        }
    }
    let [hash, label, job, scheduler] = text.map(|mut b| Arc::new(b.finish()) as ArrayRef);
    let [oe, os, e, s, observed, replayed, predicted, critical, ideal] =
        ints.map(|mut b| Arc::new(b.finish()) as ArrayRef);
    let columns = vec![
        hash,
        label,
        job,
        scheduler,
        oe,
        os,
        Arc::new(inferred.finish()) as ArrayRef,
        e,
        s,
        observed,
        replayed,
        predicted,
        critical,
        ideal,
    ];
    RecordBatch::try_new(WHATIF.clone(), columns).expect("columns built to the schema")
}

/// The most pairs `whatif_pairs` holds, the newest first (each pair is
/// two logs read, once each).
pub const MAX_PAIRS: usize = 200;

/// One graded pair: run `earlier`, then run `later` of the same query.
#[derive(Debug, Clone, PartialEq)]
pub struct PairRow {
    /// The query hash (16 hex digits).
    pub query_hash: String,
    /// The query's label, when it has one.
    pub query_label: Option<String>,
    /// The earlier run.
    pub earlier_job_id: String,
    /// The later run.
    pub later_job_id: String,
    /// The earlier run's shape.
    pub earlier_shape: (u32, u32),
    /// The later run's shape.
    pub later_shape: (u32, u32),
    /// The partitions of each run's widest stage, earlier and later.
    pub partitions: (u64, u64),
    /// What changed: `same shape`, `executors`, `slots`, `executors and
    /// slots`, `partitions` or `partitions and shape`.
    pub kind: String,
    /// The earlier run replayed on the later run's shape (ms).
    pub predicted_ms: u64,
    /// What the later run took (ms).
    pub actual_ms: u64,
    /// What the earlier run took: the naive prediction (ms).
    pub naive_ms: u64,
}

/// `whatif_pairs`' schema.
pub static WHATIF_PAIRS: LazyLock<SchemaRef> = LazyLock::new(|| {
    let text = |name: &str| Field::new(name, DataType::Utf8View, false);
    Arc::new(Schema::new(vec![
        text("query_hash"),
        Field::new("query_label", DataType::Utf8View, true),
        text("earlier_job_id"),
        text("later_job_id"),
        int("earlier_executors"),
        int("earlier_slots"),
        int("later_executors"),
        int("later_slots"),
        int("earlier_partitions"),
        int("later_partitions"),
        text("kind"),
        int("predicted_ms"),
        int("actual_ms"),
        int("naive_ms"),
        Field::new("error", DataType::Float64, false),
        Field::new("naive_error", DataType::Float64, false),
    ]))
});

/// `|got - want| / want`, a `want` of 0 read as 1 ms (as the accuracy
/// route grades).
fn relative(got: u64, want: u64) -> f64 {
    (got as f64 - want as f64).abs() / want.max(1) as f64
}

/// `rows` as one batch of [`WHATIF_PAIRS`].
pub fn pairs_batch(rows: &[PairRow]) -> RecordBatch {
    use datafusion::arrow::array::Float64Builder;
    let mut text: [StringViewBuilder; 5] = Default::default();
    let mut ints: [Int64Builder; 9] = Default::default();
    let mut errors: [Float64Builder; 2] = Default::default();
    for r in rows {
        text[0].append_value(&r.query_hash);
        text[1].append_option(r.query_label.as_deref());
        text[2].append_value(&r.earlier_job_id);
        text[3].append_value(&r.later_job_id);
        text[4].append_value(&r.kind);
        let values = [
            u64::from(r.earlier_shape.0),
            u64::from(r.earlier_shape.1),
            u64::from(r.later_shape.0),
            u64::from(r.later_shape.1),
            r.partitions.0,
            r.partitions.1,
            r.predicted_ms,
            r.actual_ms,
            r.naive_ms,
        ];
        for (b, v) in ints.iter_mut().zip(values) {
            b.append_value(i64::try_from(v).unwrap_or(i64::MAX));
        }
        errors[0].append_value(relative(r.predicted_ms, r.actual_ms));
        errors[1].append_value(relative(r.naive_ms, r.actual_ms));
    }
    let [hash, label, earlier, later, kind] = text.map(|mut b| Arc::new(b.finish()) as ArrayRef);
    let [ee, es, le, ls, ep, lp, predicted, actual, naive] =
        ints.map(|mut b| Arc::new(b.finish()) as ArrayRef);
    let [error, naive_error] = errors.map(|mut b| Arc::new(b.finish()) as ArrayRef);
    let columns = vec![
        hash,
        label,
        earlier,
        later,
        ee,
        es,
        le,
        ls,
        ep,
        lp,
        kind,
        predicted,
        actual,
        naive,
        error,
        naive_error,
    ];
    RecordBatch::try_new(WHATIF_PAIRS.clone(), columns).expect("columns built to the schema")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_row_states_its_errors_as_the_route_grades_them() {
        let row = PairRow {
            query_hash: "q".into(),
            query_label: Some("t · aggregate".into()),
            earlier_job_id: "a".into(),
            later_job_id: "b".into(),
            earlier_shape: (1, 1),
            later_shape: (2, 1),
            partitions: (8, 8),
            kind: "executors".into(),
            predicted_ms: 600,
            actual_ms: 500,
            naive_ms: 1_000,
        };
        let batch = pairs_batch(&[row]);
        let float = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap()
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Float64Array>()
                .unwrap()
                .value(0)
        };
        assert!((float("error") - 0.2).abs() < 1e-12);
        assert!((float("naive_error") - 1.0).abs() < 1e-12);
        assert_eq!(batch.num_columns(), WHATIF_PAIRS.fields().len());
    }

    #[test]
    fn each_shape_is_replayed_once() {
        assert_eq!(shapes(2, 2), [(2, 2), (3, 2), (4, 2), (2, 4)]);
        assert_eq!(shapes(1, 1), [(1, 1), (2, 1), (3, 1), (1, 2)]);
    }

    #[test]
    fn a_batch_holds_every_row_in_its_columns() {
        let row = WhatIfRow {
            query_hash: "00000000000000ff".into(),
            query_label: None,
            job_id: "j".into(),
            scheduler_id: Some("s".into()),
            observed_executors: 1,
            observed_slots: 2,
            shape_inferred: true,
            executors: 3,
            slots: 2,
            observed_ms: 10,
            replayed_ms: 11,
            predicted_ms: 5,
            critical_path_ms: u64::MAX,
            ideal_ms: 4,
        };
        let batch = whatif_batch(&[row.clone(), row]);
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.num_columns(), WHATIF.fields().len());
        assert_eq!(batch.column(1).null_count(), 2);
        let critical = batch
            .column_by_name("critical_path_ms")
            .unwrap()
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
            .unwrap();
        assert_eq!(critical.value(0), i64::MAX);
        assert!(whatif_batch(&[]).num_rows() == 0);
    }
}
