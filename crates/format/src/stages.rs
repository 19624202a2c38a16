//! The stored `GET /api/job/{id}/stages` answer, read one way by every
//! reader (the recorder's stage records, the columnar rows, the job and
//! stage pages, the operator metrics and the run-to-run comparison), and the
//! one rule for when a task attempt was launched and began.
//!
//! Upstream's `ballista_api_types::dto::QueryStagesResponse` describes the
//! same answer but reads it strictly (every field required, `stage_id` a
//! string); logs written by other versions, and the fixtures, leave fields
//! out, so this type reads leniently: a missing field is its default, a stage
//! id is a number or a numeric string, a `null` task is skipped.

use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// The three times a task attempt carries, and the rules every reader uses
/// to place it: one definition for the pages, the diagnoses and the
/// comparison.
pub trait TaskTimes {
    /// (launched by the scheduler, started on the executor, ended), epoch
    /// milliseconds, 0 when unknown.
    fn times(&self) -> (u64, u64, u64);

    /// When the attempt began: its executor start, else its launch, else its
    /// end (an attempt with no start times is a point).
    fn began(&self) -> u64 {
        let (launch, start, end) = self.times();
        [start, launch].into_iter().find(|&t| t > 0).unwrap_or(end)
    }

    /// When the scheduler handed it out: its launch, else its executor start;
    /// 0 when neither is known. Queueing and stage spans measure from here.
    fn launched(&self) -> u64 {
        let (launch, start, _) = self.times();
        if launch > 0 { launch } else { start }
    }
}

/// The whole answer; an unreadable body reads as no stages
/// ([`StagesAnswer::parse`]).
#[derive(Debug, Default, Deserialize)]
pub struct StagesAnswer {
    /// Its stages, in the scheduler's order.
    #[serde(default)]
    pub stages: Vec<StageAnswer>,
}

/// One stage of the answer.
#[derive(Debug, Default, Deserialize)]
pub struct StageAnswer {
    /// The stage id (upstream writes it as a string).
    #[serde(deserialize_with = "stage_id")]
    pub stage_id: u32,
    /// `Running`, `Successful`, `Failed`...; empty when absent.
    #[serde(default)]
    pub stage_status: String,
    /// Rows read.
    #[serde(default)]
    pub input_rows: u64,
    /// Rows written.
    #[serde(default)]
    pub output_rows: u64,
    /// Compute time as upstream words it.
    #[serde(default)]
    pub elapsed_compute: Option<String>,
    /// The stage's plan (with metrics under `?plan_format=metrics`).
    #[serde(default)]
    pub stage_plan: Option<String>,
    /// Its tasks; `null` entries are left out.
    #[serde(default, deserialize_with = "present")]
    pub tasks: Vec<TaskAnswer>,
}

/// One task of a stage.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TaskAnswer {
    /// Its id within the stage.
    pub id: u32,
    /// The partitions it computed.
    pub partition_id: Vec<u32>,
    /// Launched by the scheduler.
    pub launch_time: u64,
    /// Started on the executor.
    pub start_exec_time: u64,
    /// Ended on the executor.
    pub end_exec_time: u64,
    /// Its status reached the scheduler.
    pub finish_time: u64,
}

impl StagesAnswer {
    /// The answer in `body`; no stages when it is not one.
    pub fn parse(body: &[u8]) -> Self {
        serde_json::from_slice(body).unwrap_or_default()
    }
}

impl StageAnswer {
    /// The first launch of its tasks (0 when none is known).
    pub fn began(&self) -> u64 {
        let launched = self.tasks.iter().map(TaskTimes::launched);
        launched.filter(|&t| t > 0).min().unwrap_or(0)
    }

    /// The last end of its tasks (0 when it has none).
    pub fn ended(&self) -> u64 {
        self.tasks.iter().map(|t| t.times().2).max().unwrap_or(0)
    }

    /// Its plan, empty when absent.
    pub fn plan(&self) -> &str {
        self.stage_plan.as_deref().unwrap_or("")
    }

    /// How adaptive planning emptied this stage's reads, if it did: its
    /// plan holds `EmptyExec` (a join or union whose input came back
    /// empty) or `PlaceholderRowExec` (an aggregate or projection over an
    /// input found empty, which keeps its one row), or it reads no stage
    /// and no data of its own (any other rewrite that dropped every
    /// read). `None` for a plan that reads as planned, or no plan.
    pub fn emptied(&self) -> Option<&'static str> {
        /// Operators that read data themselves: a stage holding one is a
        /// leaf, not an emptied reader.
        const SOURCES: [&str; 9] = [
            "DataSourceExec",
            "ParquetExec",
            "CsvExec",
            "NdJsonExec",
            "AvroExec",
            "ArrowExec",
            "MemoryExec",
            "StreamingTableExec",
            "ValuesExec",
        ];
        let plan = self.plan();
        if plan.contains("EmptyExec") {
            Some("EmptyExec")
        } else if plan.contains("PlaceholderRowExec") {
            Some("PlaceholderRowExec")
        } else if !plan.trim().is_empty()
            && self.reads_from().is_empty()
            && !SOURCES.iter().any(|s| plan.contains(s))
        {
            Some("a plan that reads nothing")
        } else {
            None
        }
    }

    /// The stages whose output this stage reads, as its plan states them:
    /// every shuffle reader (`ShuffleReaderExec`, `RangeShuffleReaderExec`,
    /// any `...ShuffleReaderExec`) writes `upstream_stage: N`. Each stage
    /// once, in the plan's order. The scheduler's DOT leaves some of these
    /// edges out (a range shuffle's), the plan does not.
    pub fn reads_from(&self) -> Vec<u32> {
        const KEY: &str = "upstream_stage: ";
        let mut out = Vec::new();
        for (at, _) in self.plan().match_indices(KEY) {
            let digits = self.plan()[at + KEY.len()..]
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap_or("");
            if let Ok(stage) = digits.parse()
                && !out.contains(&stage)
            {
                out.push(stage);
            }
        }
        out
    }

    /// Whether the stage's partitions funnel into one below its root, so
    /// that one thread drives the whole task (Ballista 55's "collapse"
    /// stage): on the chain from the root's only child down through only
    /// children, before a shuffle read, a join or a leaf, an operator that
    /// merges partitions into one (`CoalescePartitionsExec`,
    /// `SortPreservingMergeExec`). Read from the plan's indentation in one
    /// pass.
    pub fn collapses(&self) -> bool {
        let lines: Vec<(usize, &str)> = self
            .plan()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| (l.len() - l.trim_start().len(), l.trim_start()))
            .collect();
        // Children per line: a line's parent is the nearest line above it
        // that is less deep.
        let mut children = vec![0usize; lines.len()];
        let mut open: Vec<usize> = Vec::new();
        for (i, &(depth, _)) in lines.iter().enumerate() {
            while open.last().is_some_and(|&p| lines[p].0 >= depth) {
                open.pop();
            }
            if let Some(&parent) = open.last() {
                children[parent] += 1;
            }
            open.push(i);
        }
        let mut at = 0;
        while children.get(at) == Some(&1) {
            at += 1;
            let name = lines[at].1;
            if name.contains("ShuffleReaderExec") {
                return false;
            }
            if name.starts_with("CoalescePartitionsExec")
                || name.starts_with("SortPreservingMergeExec")
            {
                return true;
            }
        }
        false
    }
}

/// The reads `stages`' plans state, as `(from, to)` stage ids: the stage
/// graph's edges as far as the plans tell them.
pub fn plan_reads<'a>(stages: impl IntoIterator<Item = &'a StageAnswer>) -> Vec<(u32, u32)> {
    stages
        .into_iter()
        .flat_map(|s| {
            s.reads_from()
                .into_iter()
                .map(move |from| (from, s.stage_id))
        })
        .collect()
}

/// One edge of a job's stage graph: stage `from`'s output fed stage `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageEdge {
    /// The stage that wrote.
    pub from: u32,
    /// The stage that read (or, inferred, was planned to).
    pub to: u32,
    /// For an inferred edge, what it is inferred from; `None` for a read a
    /// plan states.
    pub inferred: Option<String>,
}

/// The edges of a job's stage graph: the reads the plans state
/// ([`plan_reads`]), then, for each stage whose output no plan reads
/// (other than the last stage), the stage it most likely fed.
///
/// Adaptive planning (Ballista 55's default) rewrites plans as stages
/// finish: a join whose input came back empty becomes `EmptyExec`, and
/// the reads of *all* its inputs leave the plan, so the plans alone leave
/// stages that feed nothing. The scheduler does not keep the planned
/// links either (an adaptive job's stages have empty `output_links`,
/// and the adaptive plan, whose exchanges do hold them, is shown to the
/// job state only when the job is submitted and when it ends, before and
/// after the rewrites). So the link is inferred: stage ids are given in
/// the order stages become runnable, and a stage is runnable only once
/// its inputs have finished, so the stage a pruned stage fed came after
/// it and had its read replaced: the first later stage (by id) that
/// adaptive planning [emptied](StageAnswer::emptied) (`EmptyExec`,
/// `PlaceholderRowExec`, or no read left) and whose tasks began after the
/// pruned stage's ended, else (a stage adaptive planning superseded while
/// it still ran) the first later emptied stage. Where no stage
/// fits, no edge is drawn. The inference is right
/// for a chain of emptied stages and can pick the wrong one of two
/// emptied stages made runnable together (both then wait for the same
/// inputs, so a replay's timing is the same).
pub fn stage_edges<'a>(stages: impl IntoIterator<Item = &'a StageAnswer>) -> Vec<StageEdge> {
    let stages: BTreeMap<u32, &StageAnswer> = stages.into_iter().map(|s| (s.stage_id, s)).collect();
    let reads = plan_reads(stages.values().copied());
    let mut out: Vec<StageEdge> = reads
        .iter()
        .map(|&(from, to)| StageEdge {
            from,
            to,
            inferred: None,
        })
        .collect();
    let Some(&last) = stages.keys().next_back() else {
        return out;
    };
    for (&from, stage) in &stages {
        if from == last || reads.iter().any(|r| r.0 == from) {
            continue;
        }
        let ended = stage.ended();
        let emptied = || {
            stages
                .range(from + 1..)
                .filter_map(|(id, s)| s.emptied().map(|how| (id, s, how)))
        };
        // One that began after it ended, else (a stage superseded while
        // it ran) the first emptied after it.
        let fed = emptied()
            .find(|(_, s, _)| ended == 0 || s.began() == 0 || s.began() >= ended)
            .or_else(|| emptied().next());
        if let Some((&to, _, how)) = fed {
            out.push(StageEdge {
                from,
                to,
                inferred: Some(format!(
                    "inferred: no stage's final plan reads stage {from}; adaptive planning \
                     replaced reads with {how} (an input came back empty) in stage {to}, \
                     the first stage after it to be so rewritten"
                )),
            });
        }
    }
    out
}

/// The task slots each task of `stages` held, by `(stage id, task id)`.
/// Ballista 55 packs as many of a stage's partitions into one task as the
/// executor has slots free, and the task holds one slot per partition,
/// but a stage that [collapses](StageAnswer::collapses) packs them all
/// into one task that holds one slot. At least 1.
pub fn task_slots<'a>(
    stages: impl IntoIterator<Item = &'a StageAnswer>,
) -> BTreeMap<(u32, u32), u32> {
    stages
        .into_iter()
        .flat_map(|s| {
            let collapses = s.collapses();
            s.tasks.iter().map(move |t| {
                let held = if collapses { 1 } else { t.partition_id.len() };
                ((s.stage_id, t.id), held.max(1) as u32)
            })
        })
        .collect()
}

impl TaskTimes for TaskAnswer {
    fn times(&self) -> (u64, u64, u64) {
        let end = self.finish_time.max(self.end_exec_time);
        (self.launch_time, self.start_exec_time, end)
    }
}

impl TaskTimes for crate::record::TaskEnd {
    fn times(&self) -> (u64, u64, u64) {
        (self.launch_time, self.start_exec_time, self.end_exec_time)
    }
}

/// A stage id written as a number or a numeric string (upstream writes a
/// string); anything else reads as 0.
pub fn stage_id<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Number(u32),
        Text(String),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Id::deserialize(d)? {
        Id::Number(n) => n,
        Id::Text(t) => t.parse().unwrap_or(0),
        Id::Other(_) => 0,
    })
}

/// A list whose `null` entries are left out.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TaskAnswer>, D::Error> {
    let all = Option::<Vec<Option<TaskAnswer>>>::deserialize(d)?;
    Ok(all.unwrap_or_default().into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's own type is the oracle: what it reads, this reads alike.
    #[test]
    fn reads_what_upstreams_type_reads() {
        let json = r#"{"stages":[{"stage_id":"3","stage_status":"Successful","input_rows":7,
            "output_rows":2,"elapsed_compute":null,"stage_plan":"ProjectionExec",
            "tasks":[null,{"id":0,"status":"Successful","partition_id":[0,1],"scheduled_time":1,
            "launch_time":5,"start_exec_time":6,"end_exec_time":7,"exec_duration":1,
            "finish_time":9,"input_rows":1,"output_rows":1}]}]}"#;
        let theirs: ballista_api_types::dto::QueryStagesResponse =
            serde_json::from_str(json).unwrap();
        let ours = StagesAnswer::parse(json.as_bytes());
        assert_eq!(ours.stages.len(), theirs.stages.len());
        let (o, t) = (&ours.stages[0], &theirs.stages[0]);
        assert_eq!(o.stage_id.to_string(), t.stage_id);
        assert_eq!(o.stage_status, t.stage_status);
        assert_eq!(o.input_rows, t.input_rows as u64);
        assert_eq!(o.stage_plan, t.stage_plan);
        let their_tasks: Vec<_> = t.tasks.iter().flatten().collect();
        assert_eq!(o.tasks.len(), their_tasks.len());
        assert_eq!(o.tasks[0].partition_id, their_tasks[0].partition_id);
        assert_eq!(o.began(), their_tasks[0].launch_time);
        assert_eq!(o.ended(), their_tasks[0].finish_time);
    }

    #[test]
    fn each_task_holds_a_slot_per_partition_and_at_least_one() {
        let answer = StagesAnswer::parse(
            br#"{"stages":[{"stage_id":"1","tasks":[{"id":0,"partition_id":[0,1]},null,
                {"id":1,"partition_id":[2,3,4]}]},{"stage_id":2,"tasks":[{"id":0}]}]}"#,
        );
        let counted = task_slots(&answer.stages);
        let expected = BTreeMap::from([((1, 0), 2), ((1, 1), 3), ((2, 0), 1)]);
        assert_eq!(counted, expected);
        assert_eq!(plan_reads(&answer.stages), vec![]);
    }

    #[test]
    fn a_stage_collapses_when_its_chain_merges_partitions_before_a_read() {
        let stage = |plan: &str| StageAnswer {
            stage_plan: Some(plan.into()),
            ..StageAnswer::default()
        };
        let merged = "ShuffleWriterExec: partitioning: Hash([k@0], 4)\n  ProjectionExec: expr=[k@0]\n    \
                      CoalescePartitionsExec\n      AggregateExec: mode=Partial\n        \
                      DataSourceExec: file_groups={4 groups}";
        assert!(stage(merged).collapses());
        let sorted = "ShuffleWriterExec\n  SortPreservingMergeExec: [k@0 ASC]\n    \
                      RangeShuffleReaderExec: upstream_stage: 1";
        assert!(stage(sorted).collapses());
        // A shuffle read first, a join, a plain chain, nothing: no.
        let read_first =
            "ShuffleWriterExec\n  ShuffleReaderExec: upstream_stage: 1\n    CoalescePartitionsExec";
        assert!(!stage(read_first).collapses());
        let join = "ShuffleWriterExec\n  HashJoinExec\n    CoalescePartitionsExec\n      \
                    ShuffleReaderExec: upstream_stage: 1\n    ShuffleReaderExec: upstream_stage: 2";
        assert!(!stage(join).collapses());
        assert!(!stage("ShuffleWriterExec\n  FilterExec\n    DataSourceExec").collapses());
        assert!(!StageAnswer::default().collapses());
        // Its tasks hold one slot however many partitions they computed.
        let mut answer = stage(merged);
        answer.stage_id = 3;
        answer.tasks = vec![TaskAnswer {
            partition_id: vec![0, 1, 2, 3],
            ..TaskAnswer::default()
        }];
        assert_eq!(task_slots([&answer]), BTreeMap::from([((3, 0), 1)]));
    }

    #[test]
    fn a_stage_no_plan_reads_feeds_the_next_stage_adaptive_planning_emptied() {
        let stage = |id: u32, plan: &str, began: u64, ended: u64| StageAnswer {
            stage_id: id,
            stage_plan: Some(plan.into()),
            tasks: vec![TaskAnswer {
                launch_time: began,
                end_exec_time: ended,
                ..TaskAnswer::default()
            }],
            ..StageAnswer::default()
        };
        // Stage 1 joined stage 0 and came back empty: stage 2 (which read
        // 1) and stage 4 (which read 2 and 3) became EmptyExec. Stage 3
        // was emptied too, but began before stage 2 ended, so it cannot
        // have read 2. Stage 5, the last, reads 4.
        let stages = [
            stage(0, "ShuffleWriterExec\n  DataSourceExec", 1, 10),
            stage(
                1,
                "ShuffleWriterExec\n  ShuffleReaderExec: upstream_stage: 0",
                11,
                20,
            ),
            stage(2, "ShuffleWriterExec\n  EmptyExec", 21, 30),
            stage(3, "ShuffleWriterExec\n  EmptyExec", 25, 31),
            stage(4, "ShuffleWriterExec\n  EmptyExec", 32, 40),
            stage(
                5,
                "SortExec\n  ShuffleReaderExec: upstream_stage: 4",
                41,
                50,
            ),
        ];
        let edges = stage_edges(&stages);
        let pairs: Vec<(u32, u32, bool)> = edges
            .iter()
            .map(|e| (e.from, e.to, e.inferred.is_some()))
            .collect();
        assert_eq!(
            pairs,
            [
                (0, 1, false),
                (4, 5, false),
                (1, 2, true),
                (2, 4, true),
                (3, 4, true)
            ]
        );
        assert!(edges[2].inferred.as_deref().unwrap().contains("EmptyExec"));
        // Every stage but the last feeds another.
        let feeding: std::collections::BTreeSet<u32> = edges.iter().map(|e| e.from).collect();
        assert_eq!(feeding, (0..5).collect());
        // Nothing emptied after a stage: no edge is invented.
        let lone = [
            stage(0, "ShuffleWriterExec\n  DataSourceExec", 1, 2),
            stage(1, "ShuffleWriterExec\n  DataSourceExec", 3, 4),
        ];
        assert!(stage_edges(&lone).is_empty());
    }

    /// A regression test: TPC-DS q38's last stage became
    /// `ProjectionExec`/`PlaceholderRowExec` once adaptive planning found
    /// its input empty, and the last edge was missing.
    #[test]
    fn a_stage_emptied_to_a_placeholder_row_or_to_no_read_is_fed_too() {
        let stage = |id: u32, plan: &str, began: u64, ended: u64| StageAnswer {
            stage_id: id,
            stage_plan: Some(plan.into()),
            tasks: vec![TaskAnswer {
                launch_time: began,
                end_exec_time: ended,
                ..TaskAnswer::default()
            }],
            ..StageAnswer::default()
        };
        let stages = [
            stage(0, "ShuffleWriterExec\n  DataSourceExec", 1, 10),
            stage(1, "ShuffleWriterExec\n  DataSourceExec", 1, 10),
            stage(
                2,
                "ShuffleWriterExec\n  HashJoinExec\n    ShuffleReaderExec: upstream_stage: 0\n    ShuffleReaderExec: upstream_stage: 1",
                11,
                20,
            ),
            stage(
                3,
                "ProjectionExec: expr=[0 as count(*)]\n  PlaceholderRowExec",
                21,
                22,
            ),
        ];
        let edges = stage_edges(&stages);
        let last = edges
            .iter()
            .find(|e| e.from == 2)
            .expect("stage 2 feeds stage 3");
        assert_eq!(last.to, 3);
        assert!(
            last.inferred
                .as_deref()
                .unwrap()
                .contains("PlaceholderRowExec")
        );
        // A plan left with no read and no data of its own.
        let bare = [
            stage(0, "ShuffleWriterExec\n  DataSourceExec", 1, 10),
            stage(
                1,
                "CoalescePartitionsExec\n  ProjectionExec: expr=[]",
                11,
                12,
            ),
        ];
        let edges = stage_edges(&bare);
        assert_eq!((edges[0].from, edges[0].to), (0, 1));
        // Without a plan nothing is inferred (an old log may lack them).
        let planless = [stage(0, "", 1, 2), stage(1, "", 3, 4)];
        assert!(stage_edges(&planless).is_empty());
    }

    #[test]
    fn a_stage_reads_from_the_stages_its_shuffle_readers_name() {
        let stage = |plan: &str| StageAnswer {
            stage_plan: Some(plan.into()),
            ..StageAnswer::default()
        };
        let plan = "SortPreservingMergeExec\n  RangeShuffleReaderExec: upstream_stage: 3, partitions: 16\n\
                    HashJoinExec\n    ShuffleReaderExec: upstream_stage: 1, partitioning: Hash\n\
                    ShuffleReaderExec: upstream_stage: 12, metrics=[]\n  ShuffleReaderExec: upstream_stage: 1,";
        assert_eq!(stage(plan).reads_from(), vec![3, 1, 12]);
        assert!(stage("ParquetExec: file_groups={}").reads_from().is_empty());
        assert!(stage("upstream_stage: x").reads_from().is_empty());
        assert!(StageAnswer::default().reads_from().is_empty());
    }

    #[test]
    fn missing_fields_and_odd_ids_read_leniently() {
        let ours = StagesAnswer::parse(br#"{"stages":[{"stage_id":4},{"stage_id":{"x":1}}]}"#);
        assert_eq!(ours.stages.len(), 2);
        assert_eq!((ours.stages[0].stage_id, ours.stages[1].stage_id), (4, 0));
        assert!(ours.stages[0].tasks.is_empty());
        assert_eq!(ours.stages[0].began(), 0);
        assert!(StagesAnswer::parse(b"{").stages.is_empty());
    }

    #[test]
    fn a_task_begins_at_its_start_and_is_launched_at_its_launch() {
        let t = |launch, start_exec_time, end| TaskAnswer {
            launch_time: launch,
            start_exec_time,
            end_exec_time: end,
            ..TaskAnswer::default()
        };
        assert_eq!((t(5, 6, 9).began(), t(5, 6, 9).launched()), (6, 5));
        assert_eq!((t(0, 6, 9).began(), t(0, 6, 9).launched()), (6, 6));
        assert_eq!((t(0, 0, 9).began(), t(0, 0, 9).launched()), (9, 0));
    }
}
