//! `StringGroupsExec` against DataFusion's own partial aggregate, in one
//! process, over the same in-memory table: `SELECT g, count(*), sum(v)
//! FROM t GROUP BY g` over 2,000,000 rows in two partitions, with
//! 1,000,000, 100,000 and 16 distinct 16-byte strings. Where nearly every
//! row has a string of its own, both stop grouping after probing the
//! first 100,000 rows of each partition.
//!
//! `cargo bench --bench grouping`

use ballista_job_history::serving::sql::grouping::StringGrouping;
use criterion::{Criterion, criterion_group, criterion_main};
use datafusion::arrow::array::{Int64Array, RecordBatch, StringViewArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::MemTable;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::sync::Arc;

const ROWS: usize = 2_000_000;
const SQL: &str = "SELECT g, count(*), sum(v) FROM t GROUP BY g";

/// The table, its rows dealt batch by batch to two partitions.
fn table(distinct: usize) -> Arc<MemTable> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Utf8View, false),
        Field::new("v", DataType::Int64, false),
    ]));
    let mut partitions = vec![vec![], vec![]];
    for (n, start) in (0..ROWS).step_by(8192).enumerate() {
        let rows = start..(start + 8192).min(ROWS);
        let g: Vec<String> = rows
            .clone()
            .map(|i| format!("group-{:010}", i * 7919 % distinct))
            .collect();
        let v: Vec<i64> = rows.map(|i| i as i64).collect();
        let columns = vec![
            Arc::new(StringViewArray::from(g)) as _,
            Arc::new(Int64Array::from(v)) as _,
        ];
        partitions[n % 2].push(RecordBatch::try_new(Arc::clone(&schema), columns).unwrap());
    }
    Arc::new(MemTable::try_new(schema, partitions).unwrap())
}

/// DataFusion's session, and one with the rule.
fn sessions(table: Arc<MemTable>) -> [(&'static str, SessionContext); 2] {
    let config = || SessionConfig::new().with_target_partitions(2);
    let theirs = SessionContext::new_with_config(config());
    let state = SessionStateBuilder::new()
        .with_config(config())
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(StringGrouping))
        .build();
    let ours = SessionContext::new_with_state(state);
    theirs.register_table("t", table.clone()).unwrap();
    ours.register_table("t", table).unwrap();
    [("DataFusion", theirs), ("StringGroupsExec", ours)]
}

/// The number of groups in the answer.
async fn groups(ctx: &SessionContext) -> usize {
    let batches = ctx.sql(SQL).await.unwrap().collect().await.unwrap();
    batches.iter().map(|b| b.num_rows()).sum()
}

fn grouping(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for distinct in [1_000_000, 100_000, 16] {
        let sessions = sessions(table(distinct));
        let plan = |ctx: &SessionContext| {
            runtime.block_on(async {
                let plan = ctx.sql(SQL).await.unwrap().create_physical_plan().await;
                datafusion::physical_plan::displayable(plan.unwrap().as_ref())
                    .indent(false)
                    .to_string()
            })
        };
        // Checked before anything is timed: the operator is in one plan
        // only, and both answers have a row per string.
        assert!(!plan(&sessions[0].1).contains("StringGroupsExec"));
        assert!(plan(&sessions[1].1).contains("StringGroupsExec"));
        for (_, ctx) in &sessions {
            assert_eq!(runtime.block_on(groups(ctx)), distinct);
        }
        let mut group = c.benchmark_group(format!(
            "GROUP BY over {ROWS} rows, {distinct} distinct strings"
        ));
        group.sample_size(10);
        for (name, ctx) in &sessions {
            group.bench_function(*name, |b| {
                b.iter(|| assert_eq!(runtime.block_on(groups(ctx)), distinct))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, grouping);
criterion_main!(benches);
