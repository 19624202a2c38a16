//! Partial aggregation grouped by one string column, the shape of most
//! questions asked of the history (`GROUP BY executor`, `status`,
//! `job_id`, `operator`): [`StringGrouping`], a physical optimizer rule,
//! puts a [`StringGroupsExec`] in place of DataFusion's partial
//! `AggregateExec` there.
//!
//! The columnar files keep these columns dictionary-coded, and the Parquet
//! reader gives each row a view into its page's dictionary, so a batch of
//! thousands of rows holds a handful of distinct 16-byte views. The
//! operator looks each row's view up in a small direct-mapped cache and
//! reads the string only when the view is new to it; DataFusion hashes
//! every row's bytes and probes its table with them. A string of up to 12
//! bytes is its own view, so its cache entry serves every batch; a longer
//! one points into a batch's buffers, so its entry serves that batch only.
//!
//! The accumulators are DataFusion's own and the output is the replaced
//! operator's (each group's string, then each aggregate's state), so the
//! final aggregate above merges it unchanged. Where most rows are groups
//! of their own, it stops grouping as DataFusion's partial aggregate does
//! (the session's `skip_partial_aggregation_probe_*` settings) and gives
//! each later row as a group, with its state.

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanBufferBuilder, LargeStringArray, RecordBatch, StringViewArray,
};
use datafusion::arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::hash_utils::RandomState;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_datafusion_err};
use datafusion::execution::TaskContext;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, aggregate_expressions};
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, InputOrderMode, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;
use hashbrown::HashTable;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;

/// Replaces each partial aggregate grouped by one string column whose
/// aggregates all have DataFusion's grouped accumulators (and no
/// `FILTER`, `ORDER BY` or group limit) with a [`StringGroupsExec`].
#[derive(Debug, Default)]
pub struct StringGrouping;

impl PhysicalOptimizerRule for StringGrouping {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|plan| {
            let Some(aggregate) = plan.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(plan));
            };
            if !groups_by_one_string(aggregate) {
                return Ok(Transformed::no(plan));
            }
            Ok(Transformed::yes(
                Arc::new(StringGroupsExec::new(plan)?) as Arc<dyn ExecutionPlan>
            ))
        })
        .data()
    }

    fn name(&self) -> &str {
        "string_grouping"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether `aggregate` is a partial aggregate the operator can take.
fn groups_by_one_string(aggregate: &AggregateExec) -> bool {
    let group_by = aggregate.group_expr();
    let [(expr, _)] = group_by.expr() else {
        return false;
    };
    let input = aggregate.input_schema();
    *aggregate.mode() == AggregateMode::Partial
        && group_by.is_single()
        && expr
            .downcast_ref::<Column>()
            .is_some_and(|c| input.field(c.index()).data_type() == &DataType::Utf8View)
        && aggregate.filter_expr().iter().all(Option::is_none)
        && aggregate
            .aggr_expr()
            .iter()
            .all(|a| a.order_bys().is_empty() && a.groups_accumulator_supported())
        && aggregate.limit_options().is_none()
        && aggregate.dynamic_expressions_produced().is_empty()
        && *aggregate.input_order_mode() == InputOrderMode::Linear
}

/// A partial aggregate grouped by one string column; see the module.
#[derive(Debug)]
pub struct StringGroupsExec {
    /// The `AggregateExec` replaced: its expressions, input, output
    /// schema and properties.
    aggregate: Arc<dyn ExecutionPlan>,
    metrics: ExecutionPlanMetricsSet,
}

impl StringGroupsExec {
    /// In place of `aggregate`, a partial `AggregateExec` grouped by one
    /// string column.
    pub fn new(aggregate: Arc<dyn ExecutionPlan>) -> Result<Self> {
        let taken = aggregate
            .downcast_ref::<AggregateExec>()
            .is_some_and(groups_by_one_string);
        if !taken {
            return Err(internal_datafusion_err!(
                "StringGroupsExec takes a partial aggregate grouped by one string column"
            ));
        }
        Ok(Self {
            aggregate,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    fn replaced(&self) -> &AggregateExec {
        self.aggregate
            .downcast_ref::<AggregateExec>()
            .expect("checked when made")
    }
}

impl DisplayAs for StringGroupsExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let aggregate = self.replaced();
        let group = &aggregate.group_expr().expr()[0].1;
        let aggregates: Vec<&str> = aggregate.aggr_expr().iter().map(|a| a.name()).collect();
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => write!(
                f,
                "StringGroupsExec: mode=Partial, gby=[{group}], aggr=[{}]",
                aggregates.join(", ")
            ),
            DisplayFormatType::TreeRender => {
                writeln!(f, "gby={group}")?;
                write!(f, "aggr={}", aggregates.join(", "))
            }
        }
    }
}

impl ExecutionPlan for StringGroupsExec {
    fn name(&self) -> &str {
        "StringGroupsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.aggregate.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.aggregate.children()
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.aggregate.apply_expressions(f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let aggregate = Arc::clone(&self.aggregate).replace_children(children, options)?;
        Ok(Arc::new(StringGroupsExec::new(aggregate)?))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        self.aggregate.benefits_from_input_partitioning()
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let aggregate = self.replaced();
        let input = aggregate.input().execute(partition, Arc::clone(&context))?;
        let accumulators = aggregate
            .aggr_expr()
            .iter()
            .map(|a| a.create_groups_accumulator())
            .collect::<Result<Vec<_>>>()?;
        let reservation = MemoryConsumer::new(format!("StringGroupsExec[{partition}]"))
            .register(context.memory_pool());
        let schema = aggregate.schema();
        let options = &context.session_config().options().execution;
        let ratio = options.skip_partial_aggregation_probe_ratio_threshold;
        // As DataFusion's partial aggregate: a ratio of 1 or more never
        // skips.
        let probe = (ratio < 1.0).then(|| Probe {
            rows_threshold: options.skip_partial_aggregation_probe_rows_threshold,
            ratio,
            rows: 0,
            skipped: MetricBuilder::new(&self.metrics)
                .counter("skipped_aggregation_rows", partition),
        });
        let run = Run {
            input,
            group: Arc::clone(&aggregate.group_expr().expr()[0].0),
            args: aggregate_expressions(aggregate.aggr_expr(), aggregate.mode(), 0)?,
            aggregates: aggregate.aggr_expr().to_vec(),
            accumulators,
            groups: Groups::new(),
            schema: Arc::clone(&schema),
            batch_size: context.session_config().batch_size(),
            reservation,
            out: VecDeque::new(),
            probe,
            skipping: false,
            done: false,
            metrics: BaselineMetrics::new(&self.metrics, partition),
        };
        let stream = futures::stream::unfold(run, |mut run| async move {
            let item = run.next().await?;
            Some((item, run))
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// One partition's aggregation.
struct Run {
    input: SendableRecordBatchStream,
    group: Arc<dyn PhysicalExpr>,
    /// Each aggregate's arguments.
    args: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    aggregates: Vec<Arc<datafusion::physical_expr::aggregate::AggregateFunctionExpr>>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    groups: Groups,
    schema: SchemaRef,
    batch_size: usize,
    reservation: MemoryReservation,
    /// Batches emitted, not yet given.
    out: VecDeque<RecordBatch>,
    /// Whether to stop grouping, as DataFusion's partial aggregate does:
    /// `None` if the session says never.
    probe: Option<Probe>,
    /// Whether each batch is now given as it is, one group per row.
    skipping: bool,
    done: bool,
    metrics: BaselineMetrics,
}

impl Run {
    async fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some(batch) = self.out.pop_front() {
                self.metrics.record_output(batch.num_rows());
                return Some(Ok(batch));
            }
            if self.done {
                self.metrics.done();
                return None;
            }
            let step = match self.input.next().await {
                Some(Ok(batch)) if self.skipping => self.pass(&batch),
                Some(Ok(batch)) => self.update(&batch),
                Some(Err(e)) => Err(e),
                None => {
                    self.done = true;
                    self.emit()
                }
            };
            if let Err(e) = step {
                self.done = true;
                self.out.clear();
                return Some(Err(e));
            }
        }
    }

    fn update(&mut self, batch: &RecordBatch) -> Result<()> {
        let elapsed = self.metrics.elapsed_compute().clone();
        // Stopped before emitting, which times itself.
        let timer = elapsed.timer();
        let rows = batch.num_rows();
        let column = self.group.evaluate(batch)?.into_array(rows)?;
        let strings = column
            .as_string_view_opt()
            .ok_or_else(|| internal_datafusion_err!("StringGroupsExec: group is not a string"))?;
        self.groups.assign(strings);
        for (accumulator, args) in self.accumulators.iter_mut().zip(&self.args) {
            let values = evaluate(args, batch)?;
            accumulator.update_batch(&values, &self.groups.indices, None, self.groups.len())?;
        }
        if let Some(probe) = &mut self.probe {
            probe.rows += rows;
            if probe.rows >= probe.rows_threshold
                && self.groups.len() as f64 / probe.rows as f64 > probe.ratio
            {
                // Nearly every row is a group of its own: grouping here
                // only delays the final aggregate.
                self.skipping = true;
                timer.done();
                return self.emit();
            }
        }
        let size = self.groups.size() + self.accumulators.iter().map(|a| a.size()).sum::<usize>();
        if self.reservation.try_resize(size).is_err() {
            // A partial aggregate may give its groups early: the final
            // aggregate merges them with the later ones.
            timer.done();
            self.emit()?;
        }
        Ok(())
    }

    /// Gives `batch` as it is, each row a group of its own, with each
    /// aggregate's state of that one row.
    fn pass(&mut self, batch: &RecordBatch) -> Result<()> {
        let elapsed = self.metrics.elapsed_compute().clone();
        let _timer = elapsed.timer();
        let rows = batch.num_rows();
        let mut columns = vec![self.group.evaluate(batch)?.into_array(rows)?];
        for (accumulator, args) in self.accumulators.iter().zip(&self.args) {
            let values = evaluate(args, batch)?;
            columns.extend(accumulator.convert_to_state(&values, None)?);
        }
        if let Some(probe) = &self.probe {
            probe.skipped.add(rows);
        }
        self.out
            .push_back(RecordBatch::try_new(Arc::clone(&self.schema), columns)?);
        Ok(())
    }

    /// Gives the groups so far and starts again.
    fn emit(&mut self) -> Result<()> {
        let elapsed = self.metrics.elapsed_compute().clone();
        let _timer = elapsed.timer();
        let groups = std::mem::replace(&mut self.groups, Groups::new());
        if groups.len() > 0 {
            let mut columns: Vec<ArrayRef> = vec![Arc::new(groups.into_values()?)];
            for accumulator in &mut self.accumulators {
                columns.extend(accumulator.state(EmitTo::All)?);
            }
            let batch = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
            let rows = batch.num_rows();
            for offset in (0..rows).step_by(self.batch_size.max(1)) {
                self.out
                    .push_back(batch.slice(offset, self.batch_size.min(rows - offset)));
            }
        }
        // Emitting leaves the accumulators empty, but some keep their
        // allocations: new ones start from nothing (if there is more input).
        if !self.done {
            self.accumulators = self
                .aggregates
                .iter()
                .map(|a| a.create_groups_accumulator())
                .collect::<Result<Vec<_>>>()?;
        }
        self.reservation.free();
        Ok(())
    }
}

/// Each of `exprs` over `batch`, as an array of its rows.
fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
        .collect()
}

/// When to stop grouping: after `rows_threshold` rows, if more than
/// `ratio` of them are groups of their own (DataFusion's
/// `skip_partial_aggregation_probe_*` settings).
struct Probe {
    rows_threshold: usize,
    ratio: f64,
    /// Rows grouped so far.
    rows: usize,
    /// Rows given without grouping.
    skipped: Count,
}

/// Cache slots; a power of two.
const SLOTS: usize = 256;
/// A slot's batch for a string of up to 12 bytes: any batch.
const ANY_BATCH: u64 = 0;
/// A slot's batch before its first use: none.
const NO_BATCH: u64 = u64::MAX;

#[derive(Clone, Copy)]
struct Slot {
    view: u128,
    group: usize,
    batch: u64,
}

/// The groups: each distinct string (and null) numbered in the order seen.
struct Groups {
    /// The groups' strings, one after another.
    bytes: Vec<u8>,
    /// Where each group's string starts in `bytes`, then where the last
    /// ends: group `g` is `bytes[offsets[g]..offsets[g + 1]]` (the null
    /// group's is empty).
    offsets: Vec<i64>,
    /// Each string's hash and group.
    table: HashTable<(u64, usize)>,
    hasher: RandomState,
    null: Option<usize>,
    /// Made by the first batch.
    cache: Option<Box<[Slot; SLOTS]>>,
    /// The batch being assigned, counted from 1.
    batch: u64,
    /// The group of each row of the batch assigned last.
    indices: Vec<usize>,
}

impl Groups {
    fn new() -> Self {
        Self {
            bytes: Vec::new(),
            offsets: vec![0],
            table: HashTable::new(),
            hasher: RandomState::default(),
            null: None,
            cache: None,
            batch: ANY_BATCH,
            indices: Vec::new(),
        }
    }

    /// How many groups there are.
    fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The groups' strings, in group order. The views point into the
    /// strings' buffer, which is not copied.
    fn into_values(self) -> Result<StringViewArray> {
        let nulls = self.null.map(|null| {
            let mut valid = BooleanBufferBuilder::new(self.len());
            valid.append_n(self.len(), true);
            valid.set_bit(null, false);
            NullBuffer::new(valid.finish())
        });
        let strings = LargeStringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(self.offsets)),
            Buffer::from_vec(self.bytes),
            nulls,
        )?;
        Ok(StringViewArray::from(&strings))
    }

    /// Numbers each row of `strings` by its group, in `indices`.
    fn assign(&mut self, strings: &StringViewArray) {
        self.batch += 1;
        let batch = self.batch;
        let (mut cache, mut indices) = self.take();
        indices.clear();
        indices.resize(strings.len(), 0);
        let rows = indices.iter_mut().zip(strings.views()).enumerate();
        match strings.nulls().filter(|n| n.null_count() > 0) {
            None => {
                for (i, (index, &view)) in rows {
                    *index = self.group_of(&mut cache, strings, i, view, batch);
                }
            }
            Some(nulls) => {
                for (i, (index, &view)) in rows {
                    *index = if nulls.is_null(i) {
                        self.null_group()
                    } else {
                        self.group_of(&mut cache, strings, i, view, batch)
                    };
                }
            }
        }
        self.cache = Some(cache);
        self.indices = indices;
    }

    /// The cache and the rows' groups, taken out while rows are assigned.
    fn take(&mut self) -> (Box<[Slot; SLOTS]>, Vec<usize>) {
        let cache = self.cache.take().unwrap_or_else(|| {
            Box::new(
                [Slot {
                    view: 0,
                    group: 0,
                    batch: NO_BATCH,
                }; SLOTS],
            )
        });
        (cache, std::mem::take(&mut self.indices))
    }

    /// The group of row `i`, whose view is `view`, of batch `batch`.
    #[inline(always)]
    fn group_of(
        &mut self,
        cache: &mut [Slot; SLOTS],
        strings: &StringViewArray,
        i: usize,
        view: u128,
        batch: u64,
    ) -> usize {
        let slot = &mut cache[slot_of(view)];
        if slot.view == view && (slot.batch == ANY_BATCH || slot.batch == batch) {
            return slot.group;
        }
        self.missed(slot, strings.value(i), view, batch)
    }

    /// The group of a view not in the cache, put in `slot`.
    #[cold]
    #[inline(never)]
    fn missed(&mut self, slot: &mut Slot, value: &str, view: u128, batch: u64) -> usize {
        let group = self.number(value);
        let inline = view as u32 <= 12;
        *slot = Slot {
            view,
            group,
            batch: if inline { ANY_BATCH } else { batch },
        };
        group
    }

    fn null_group(&mut self) -> usize {
        if let Some(group) = self.null {
            return group;
        }
        let group = self.len();
        self.null = Some(group);
        self.offsets.push(self.bytes.len() as i64);
        group
    }

    /// The group of `value`, new if it has none.
    fn number(&mut self, value: &str) -> usize {
        let value = value.as_bytes();
        let hash = self.hasher.hash_one(value);
        let (bytes, offsets) = (&self.bytes, &self.offsets);
        let found = self.table.find(hash, |&(h, group)| {
            h == hash && &bytes[offsets[group] as usize..offsets[group + 1] as usize] == value
        });
        if let Some(&(_, group)) = found {
            return group;
        }
        let group = self.len();
        self.bytes.extend_from_slice(value);
        self.offsets.push(self.bytes.len() as i64);
        self.table.insert_unique(hash, (hash, group), |&(h, _)| h);
        group
    }

    /// Bytes held, about.
    fn size(&self) -> usize {
        self.bytes.capacity()
            + self.offsets.capacity() * size_of::<i64>()
            + self.table.capacity() * (size_of::<(u64, usize)>() + 1)
            + size_of::<[Slot; SLOTS]>()
            + self.indices.capacity() * size_of::<usize>()
    }
}

/// The cache slot of a view: its two halves folded and multiplied, the
/// top bits taken.
fn slot_of(view: u128) -> usize {
    let folded = (view as u64) ^ ((view >> 64) as u64);
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::datasource::MemTable;
    use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("g", DataType::Utf8View, true),
            Field::new("v", DataType::Int64, true),
        ]))
    }

    fn batch(groups: Vec<Option<String>>, values: Vec<Option<i64>>) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(StringViewArray::from(groups)),
                Arc::new(Int64Array::from(values)),
            ],
        )
        .unwrap()
    }

    /// Two sessions of two partitions over the same table: DataFusion's
    /// own, and one with the rule.
    fn sessions() -> (SessionContext, SessionContext) {
        sessions_probing_after(100_000)
    }

    /// [`sessions`], whose partial aggregates decide whether to stop
    /// grouping after `rows` rows (DataFusion's default: 100,000).
    fn sessions_probing_after(rows: usize) -> (SessionContext, SessionContext) {
        let config = || {
            let mut config = SessionConfig::new()
                .with_target_partitions(2)
                .with_batch_size(1000);
            config
                .options_mut()
                .execution
                .skip_partial_aggregation_probe_rows_threshold = rows;
            config
        };
        let theirs = SessionContext::new_with_config(config());
        let state = datafusion::execution::session_state::SessionStateBuilder::new()
            .with_config(config())
            .with_default_features()
            .with_physical_optimizer_rule(Arc::new(StringGrouping))
            .build();
        (theirs, SessionContext::new_with_state(state))
    }

    /// The plan, as text.
    async fn plan(ctx: &SessionContext, sql: &str) -> String {
        let frame = ctx.sql(sql).await.unwrap();
        let plan = frame.create_physical_plan().await.unwrap();
        datafusion::physical_plan::displayable(plan.as_ref())
            .indent(false)
            .to_string()
    }

    /// The answer sorted by `g`, as text, and the plan, as text.
    async fn answer(ctx: &SessionContext, sql: &str) -> (String, String) {
        let plan = plan(ctx, sql).await;
        let frame = ctx.sql(sql).await.unwrap();
        let batches = frame.sort_by(vec![datafusion::prelude::col("g")]).unwrap();
        let text = pretty_format_batches(&batches.collect().await.unwrap())
            .unwrap()
            .to_string();
        (text, plan)
    }

    const QUESTIONS: [&str; 3] = [
        "SELECT g, count(*), count(v), sum(v), avg(v), min(v), max(v) FROM t GROUP BY g",
        "SELECT g, count(*) AS n FROM t WHERE v % 3 = 0 GROUP BY 1 HAVING count(*) > 1",
        "SELECT g, stddev(v), approx_distinct(v), bool_or(v > 50) FROM t GROUP BY g",
    ];

    /// Asks each question of both sessions: the same answers, and the
    /// operator in the plan of the one with the rule.
    async fn same_answers(theirs: &SessionContext, ours: &SessionContext) {
        same_answers_to(&QUESTIONS, theirs, ours).await
    }

    /// [`same_answers`] to `questions`.
    async fn same_answers_to(questions: &[&str], theirs: &SessionContext, ours: &SessionContext) {
        for &sql in questions {
            let (expected, plan) = answer(theirs, sql).await;
            assert!(!plan.contains("StringGroupsExec"), "{plan}");
            let (got, plan) = answer(ours, sql).await;
            assert!(plan.contains("StringGroupsExec"), "{plan}");
            assert_eq!(got, expected, "{sql}");
        }
    }

    #[tokio::test]
    async fn answers_as_datafusion_does_over_short_long_many_and_null_strings() {
        // 6,000 rows over 2,500 distinct strings (more than the cache's
        // slots), short and long, with nulls among strings and values.
        let rows = 6_000;
        let group = |i: usize| match i % 7 {
            0 => None,
            1 | 2 => Some(format!("e-{}", i % 16)),
            3 | 4 => Some(format!("a-string-longer-than-a-view-{}", i % 5)),
            _ => Some(format!("distinct-string-{}", i % 2_500)),
        };
        let value = |i: usize| (!i.is_multiple_of(11)).then_some((i * 37 % 101) as i64);
        let batches: Vec<RecordBatch> = (0..rows)
            .step_by(700)
            .map(|start| {
                let range = start..(start + 700).min(rows);
                batch(
                    range.clone().map(group).collect(),
                    range.map(value).collect(),
                )
            })
            .collect();
        let half = batches.len() / 2;
        let table = MemTable::try_new(
            schema(),
            vec![batches[..half].to_vec(), batches[half..].to_vec()],
        )
        .unwrap();
        let table = Arc::new(table);
        let (theirs, ours) = sessions();
        theirs.register_table("t", table.clone()).unwrap();
        ours.register_table("t", table).unwrap();
        same_answers(&theirs, &ours).await;
    }

    #[tokio::test]
    async fn answers_as_datafusion_does_over_dictionary_coded_parquet() {
        // Two Parquet row groups, each with a dictionary of two strings of
        // the same length and first four bytes, as the columnar files
        // hold `executor` and `job_id`.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let props = datafusion::parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(100))
            .build();
        let file = std::fs::File::create(&path).unwrap();
        let mut writer =
            datafusion::parquet::arrow::ArrowWriter::try_new(file, schema(), Some(props)).unwrap();
        for name in ["first-row-group-strings", "later-row-group-strings"] {
            let groups = (0..100)
                .map(|i| Some(format!("{name}-{}", i % 2)))
                .collect();
            writer
                .write(&batch(groups, (0..100).map(Some).collect()))
                .unwrap();
        }
        writer.close().unwrap();
        let (theirs, ours) = sessions();
        for ctx in [&theirs, &ours] {
            ctx.register_parquet("t", path.to_str().unwrap(), ParquetReadOptions::default())
                .await
                .unwrap();
        }
        let (got, _) = answer(&ours, QUESTIONS[0]).await;
        assert_eq!(got.matches("-strings-").count(), 4, "{got}");
        same_answers(&theirs, &ours).await;
    }

    #[tokio::test]
    async fn under_a_small_memory_limit_the_groups_are_given_early_and_all_counted() {
        // 20 batches of 500 rows over 400 strings, in one partition.
        let group = |i: usize| format!("string-number-{}", i * 7 % 400);
        let batches: Vec<RecordBatch> = (0..20)
            .map(|b| {
                let rows = b * 500..(b + 1) * 500;
                batch(
                    rows.clone().map(|i| Some(group(i))).collect(),
                    rows.map(|_| Some(1)).collect(),
                )
            })
            .collect();
        let table = MemTable::try_new(schema(), vec![batches.clone(), vec![]]).unwrap();
        let (_, ours) = sessions();
        ours.register_table("t", Arc::new(table)).unwrap();
        let plan = ours
            .sql("SELECT g, count(*) FROM t GROUP BY g")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let mut operator = None;
        plan.apply(|node| {
            if node.downcast_ref::<StringGroupsExec>().is_some() {
                operator = Some(Arc::clone(node));
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        let operator = operator.expect("the rule applies");
        // Less than the cache and one batch's groups take.
        let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_memory_limit(16 * 1024, 1.0)
            .build_arc()
            .unwrap();
        let context = Arc::new(TaskContext::default().with_runtime(runtime));
        let stream = operator.execute(0, context).unwrap();
        let given: Vec<RecordBatch> = stream.map(|b| b.unwrap()).collect().await;
        // The count of each string, made from the rows.
        let mut expected = std::collections::BTreeMap::<String, i64>::new();
        for i in 0..10_000 {
            *expected.entry(group(i)).or_default() += 1;
        }
        let mut counted = std::collections::BTreeMap::<String, i64>::new();
        let mut rows = 0;
        for b in &given {
            rows += b.num_rows();
            let strings = b.column(0).as_string_view();
            let counts = b
                .column(1)
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            for i in 0..b.num_rows() {
                *counted.entry(strings.value(i).to_string()).or_default() += counts.value(i);
            }
        }
        assert!(
            rows > expected.len(),
            "given early: {rows} rows for {} strings",
            expected.len()
        );
        assert_eq!(counted, expected);
    }

    /// The rows each partial aggregate of the operator gave without
    /// grouping them, after running `sql` to its end.
    async fn skipped_rows(ctx: &SessionContext, sql: &str) -> usize {
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        datafusion::physical_plan::collect(Arc::clone(&plan), ctx.task_ctx())
            .await
            .unwrap();
        let mut skipped = None;
        plan.apply(|node| {
            if node.downcast_ref::<StringGroupsExec>().is_some() {
                let metrics = node.metrics().unwrap();
                skipped = metrics.sum_by_name("skipped_aggregation_rows");
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        skipped
            .expect("the operator counts the rows it skips")
            .as_usize()
    }

    #[tokio::test]
    async fn where_nearly_every_row_is_a_group_the_rows_pass_ungrouped_as_in_datafusion() {
        // Two partitions of 3,000 rows in batches of 500: 5,000 distinct
        // strings and nulls, then 16 strings; probed after 1,000 rows.
        let table = |group: fn(usize) -> Option<String>| {
            let batches: Vec<Vec<RecordBatch>> = [0, 3_000]
                .into_iter()
                .map(|first| {
                    (first..first + 3_000)
                        .step_by(500)
                        .map(|start| {
                            let rows = start..start + 500;
                            batch(
                                rows.clone().map(group).collect(),
                                rows.map(|i| Some((i % 97) as i64)).collect(),
                            )
                        })
                        .collect()
                })
                .collect();
            Arc::new(MemTable::try_new(schema(), batches).unwrap())
        };
        let many = table(|i| (!i.is_multiple_of(13)).then(|| format!("a-string-of-its-own-{i}")));
        let few = table(|i| Some(format!("one-of-sixteen-strings-{}", i % 16)));
        // Answers that do not depend on the order in which the final
        // aggregate merges the rows' states (a float sum of squares
        // would): in both engines that is the order in which the two
        // partitions' batches arrive.
        let exact = [
            QUESTIONS[0],
            QUESTIONS[1],
            "SELECT g, approx_distinct(v), bool_or(v > 50), bool_and(v < 90) FROM t GROUP BY g",
        ];
        for (rows, expected) in [(many, 6_000 - 2 * 1_000), (few, 0)] {
            let (theirs, ours) = sessions_probing_after(1_000);
            theirs.register_table("t", rows.clone()).unwrap();
            ours.register_table("t", rows).unwrap();
            same_answers_to(&exact, &theirs, &ours).await;
            // Each partition groups its first two batches, then finds
            // more than 80% of its rows to be groups (or not).
            assert_eq!(skipped_rows(&ours, QUESTIONS[0]).await, expected);
        }
    }

    #[test]
    fn a_group_limit_filter_or_ordered_aggregate_is_left_to_datafusion() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let (_, ours) = sessions();
            let table = MemTable::try_new(
                schema(),
                vec![vec![batch(vec![Some("a".into())], vec![Some(1)])]],
            )
            .unwrap();
            ours.register_table("t", Arc::new(table)).unwrap();
            for sql in [
                "SELECT g FROM t GROUP BY g LIMIT 3",
                "SELECT g, count(*) FILTER (WHERE v > 1) FROM t GROUP BY g",
                "SELECT g, array_agg(v ORDER BY v) FROM t GROUP BY g",
                "SELECT g, v, count(*) FROM t GROUP BY g, v",
                "SELECT v, count(*) FROM t GROUP BY v",
            ] {
                let plan = plan(&ours, sql).await;
                assert!(!plan.contains("StringGroupsExec"), "{sql}: {plan}");
            }
        });
    }
}
