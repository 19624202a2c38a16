//! A job's task timeline, read from its log: the rows of a page of tasks
//! (what `GET /api/job/{id}/timeline` answers as JSON) and the picture
//! (`timeline.svg`).
//!
//! **Invariant:** the log is streamed (`store::records::scan`), so
//! memory is bounded by one progress record plus the page asked for (the
//! picture holds one small tuple per task).

use crate::words::duration;
use ballista_api_types::dto::TaskStatus;
use bjh_format::JobState;
use bjh_format::record::{JobStart, TaskEnd};
use bjh_format::stages::TaskTimes;
use bjh_store::LogRef;
use bjh_store::StoreError;
pub use bjh_store::records::JobHeader;
use bjh_store::records::{Rec, scan};
use maud::{Markup, html};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// Tasks per page unless `limit` says otherwise.
pub const DEFAULT_LIMIT: usize = 1_000;
/// The most tasks one page may ask for.
pub const MAX_LIMIT: usize = 100_000;

/// `?limit=&offset=` of the timeline.
#[derive(Debug, Clone, Copy)]
pub struct TimelineParams {
    /// Tasks per page.
    pub limit: usize,
    /// Tasks skipped.
    pub offset: usize,
}

impl Default for TimelineParams {
    fn default() -> Self {
        Self {
            limit: DEFAULT_LIMIT,
            offset: 0,
        }
    }
}

/// One stage of the timeline.
#[derive(Debug, Clone, Serialize, Default, utoipa::ToSchema)]
pub struct StageRow {
    /// Stage id.
    pub stage_id: u32,
    /// Input partitions, when the log records them.
    pub partitions: Option<u32>,
    /// Terminal status as the scheduler names it, else `Running` (the job
    /// is unfinished) or `Unknown`.
    pub status: String,
    /// First task launch (epoch millis).
    pub start_time: u64,
    /// Last task end (epoch millis).
    pub end_time: u64,
    /// Task attempts recorded.
    pub tasks: u64,
    /// Of which failed.
    pub failed_tasks: u64,
}

/// One task attempt of the timeline.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TaskRow {
    /// Stage.
    pub stage_id: u32,
    /// Stage attempt.
    pub stage_attempt: u32,
    /// Task id.
    pub task_id: u32,
    /// Executor that ran it.
    pub executor_id: String,
    /// `Successful`, `Failed` or `Running`.
    pub status: &'static str,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// The failure's error text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Launched by the scheduler (epoch millis).
    pub launch_time: u64,
    /// Started on the executor.
    pub start_exec_time: u64,
    /// Finished on the executor.
    pub end_exec_time: u64,
    /// Rows read.
    pub input_rows: u64,
    /// Rows written.
    pub output_rows: u64,
    /// Compute time (nanoseconds).
    pub elapsed_compute_nanos: u64,
}

impl TaskRow {
    fn of(t: TaskEnd) -> Self {
        let (status, failure_reason, error) = match t.status {
            TaskStatus::Successful => ("Successful", None, None),
            TaskStatus::Running => ("Running", None, None),
            TaskStatus::Failed { reason, error } => ("Failed", Some(reason), Some(error)),
        };
        Self {
            stage_id: t.stage_id,
            stage_attempt: t.stage_attempt,
            task_id: t.task_id,
            executor_id: t.executor_id,
            status,
            failure_reason,
            error,
            launch_time: t.launch_time,
            start_exec_time: t.start_exec_time,
            end_exec_time: t.end_exec_time,
            input_rows: t.metrics.input_rows,
            output_rows: t.metrics.output_rows,
            elapsed_compute_nanos: t.metrics.elapsed_compute_nanos,
        }
    }
}

/// `GET /api/job/{id}/timeline`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Timeline {
    /// The job.
    pub job_id: String,
    /// Its name.
    pub job_name: String,
    /// `Completed`, `Failed`, `Cancelled`, `Running` or `Abandoned`.
    pub status: &'static str,
    /// Whether the timeline holds every task: the job finished and no
    /// progress record was dropped.
    pub complete: bool,
    /// Progress records dropped under backpressure (`null` while the job
    /// is unfinished).
    pub dropped_records: Option<u64>,
    /// Queued (epoch millis).
    pub queued_at: u64,
    /// Started.
    pub start_time: u64,
    /// Ended (0 while unfinished).
    pub end_time: u64,
    /// Every stage, by id.
    pub stages: Vec<StageRow>,
    /// Task attempts recorded (all pages).
    pub total_tasks: u64,
    /// This page's first task.
    pub offset: usize,
    /// This page's size limit.
    pub limit: usize,
    /// The page of tasks, in the order they finished.
    pub tasks: Vec<TaskRow>,
}

#[derive(Default)]
struct Stages(BTreeMap<u32, StageRow>);

impl Stages {
    fn entry(&mut self, stage_id: u32) -> &mut StageRow {
        self.0.entry(stage_id).or_insert_with(|| StageRow {
            stage_id,
            ..Default::default()
        })
    }

    fn task(&mut self, t: &TaskEnd) {
        let s = self.entry(t.stage_id);
        s.tasks += 1;
        if matches!(t.status, TaskStatus::Failed { .. }) {
            s.failed_tasks += 1;
        }
    }

    fn record(&mut self, rec: &Rec) {
        match rec {
            Rec::StageStart(s) => {
                let row = self.entry(s.stage_id);
                row.partitions = Some(s.partitions);
                if s.start_time > 0 {
                    row.start_time = s.start_time;
                }
            }
            Rec::StageEnd(s) => {
                let row = self.entry(s.stage_id);
                row.status = s.status.clone();
                if s.end_time > 0 {
                    row.end_time = s.end_time;
                }
            }
            _ => {}
        }
    }

    fn finish(self, state: JobState) -> Vec<StageRow> {
        self.0
            .into_values()
            .map(|mut s| {
                if s.status.is_empty() {
                    s.status = match state {
                        JobState::Running | JobState::Queued => "Running".into(),
                        _ => "Unknown".into(),
                    };
                }
                s
            })
            .collect()
    }
}

/// Reads one page of the timeline of the log at `path`.
pub fn read_timeline(
    log: impl Into<LogRef>,
    header: &JobHeader,
    params: TimelineParams,
) -> Result<Timeline, StoreError> {
    let path: &LogRef = &log.into();
    let mut stages = Stages::default();
    let mut start = JobStart::default();
    let mut tasks = Vec::new();
    let mut total: u64 = 0;
    let end = params.offset.saturating_add(params.limit) as u64;
    // Stage times come from the stage records when present, else from the
    // tasks; collect task-derived times apart so records win.
    let mut derived: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    scan(path, |rec| {
        stages.record(&rec);
        match rec {
            Rec::Start(s) => start = s,
            Rec::Task(t) => {
                stages.task(&t);
                let begin = t.launched();
                let d = derived.entry(t.stage_id).or_insert((0, 0));
                if begin > 0 && (d.0 == 0 || begin < d.0) {
                    d.0 = begin;
                }
                d.1 = d.1.max(t.end_exec_time);
                if total >= params.offset as u64 && total < end {
                    tasks.push(TaskRow::of(t));
                }
                total += 1;
            }
            _ => {}
        }
    })?;
    for (stage_id, (begin, finish)) in derived {
        let s = stages.entry(stage_id);
        if s.start_time == 0 {
            s.start_time = begin;
        }
        if s.end_time == 0 {
            s.end_time = finish;
        }
    }
    let finished = !header.state.is_unfinished();
    Ok(Timeline {
        job_id: header.job_id.clone(),
        job_name: start.job_name,
        status: header.state.status_word(),
        complete: finished && header.dropped_records == Some(0),
        dropped_records: header.dropped_records,
        queued_at: start.queued_at,
        start_time: if header.start_time > 0 {
            header.start_time
        } else {
            start.submitted_at
        },
        end_time: header.end_time,
        stages: stages.finish(header.state),
        total_tasks: total,
        offset: params.offset,
        limit: params.limit,
        tasks,
    })
}

/// One bar of the picture.
struct Bar {
    executor: u32,
    stage_id: u32,
    task_id: u32,
    start: u64,
    end: u64,
    status: &'static str,
}

/// Draws the timeline of the log at `path` as SVG: one lane per executor
/// (split into as many rows as it ran tasks at once), one bar per task
/// attempt coloured by status, time on the x axis.
pub fn render_svg(log: impl Into<LogRef>, header: &JobHeader) -> Result<String, StoreError> {
    let path: &LogRef = &log.into();
    let mut executors: BTreeMap<String, u32> = BTreeMap::new();
    let mut bars = Vec::new();
    let mut job_name = String::new();
    scan(path, |rec| match rec {
        Rec::Start(s) => job_name = s.job_name,
        Rec::Task(t) => {
            let next = executors.len() as u32;
            let executor = *executors.entry(t.executor_id.clone()).or_insert(next);
            let start = t.began();
            bars.push(Bar {
                executor,
                stage_id: t.stage_id,
                task_id: t.task_id,
                start,
                end: t.end_exec_time.max(start),
                status: match t.status {
                    TaskStatus::Successful => "Successful",
                    TaskStatus::Failed { .. } => "Failed",
                    TaskStatus::Running => "Running",
                },
            });
        }
        _ => {}
    })?;
    Ok(draw(header, &job_name, &executors, bars))
}

/// `text` with the characters XML 1.0 cannot hold (control characters
/// other than tab and line ends) replaced; maud escapes the rest.
fn xml_text(text: &str) -> String {
    let allowed = |c: char| (c as u32) >= 0x20 || matches!(c, '\t' | '\n' | '\r');
    text.chars()
        .map(|c| if allowed(c) { c } else { '\u{FFFD}' })
        .collect()
}

/// A tick step giving at most about ten ticks over `span` ms.
fn tick_step(span: u64) -> u64 {
    const STEPS: [u64; 22] = [
        1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000,
        120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000,
    ];
    STEPS
        .iter()
        .copied()
        .find(|s| span / s <= 10)
        .unwrap_or_else(|| span.div_ceil(10).div_ceil(3_600_000) * 3_600_000)
}

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 200.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 64.0;
const LANE_GAP: f64 = 8.0;
const PLOT: f64 = WIDTH - LEFT - RIGHT;

/// Where every bar goes: each executor's lane is split into rows, and a bar
/// goes in the first row of its lane whose last bar ended before it
/// started.
struct Layout {
    /// Rows per lane: the end of each row's last bar.
    lane_rows: Vec<Vec<u64>>,
    /// Each bar's (lane, row), in the order of the sorted bars.
    placed: Vec<(usize, usize)>,
    /// Each lane's top edge.
    lane_top: Vec<f64>,
    row_h: f64,
    plot_bottom: f64,
    /// The time span drawn: first start and last end.
    t0: u64,
    t1: u64,
}

impl Layout {
    fn of(bars: &mut [Bar], lanes: usize) -> Self {
        let t0 = bars.iter().map(|b| b.start).min().unwrap_or(0);
        let t1 = bars.iter().map(|b| b.end).max().unwrap_or(0);
        bars.sort_by_key(|b| (b.executor, b.start, b.end));
        let mut lane_rows: Vec<Vec<u64>> = vec![Vec::new(); lanes];
        let mut placed: Vec<(usize, usize)> = Vec::with_capacity(bars.len());
        // The rows of the current lane that are busy (by when they end)
        // and free (by index): each bar takes the first row free at its
        // start, in O(log rows), however many bars overlap.
        let mut busy: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        let mut free: BTreeSet<usize> = BTreeSet::new();
        let mut lane = usize::MAX;
        for b in bars.iter() {
            if b.executor as usize != lane {
                lane = b.executor as usize;
                busy.clear();
                free.clear();
            }
            while let Some(&Reverse((end, row))) = busy.peek()
                && end <= b.start
            {
                busy.pop();
                free.insert(row);
            }
            let rows = &mut lane_rows[lane];
            let row = free.pop_first().unwrap_or_else(|| {
                rows.push(0);
                rows.len() - 1
            });
            let end = b.end.max(b.start + 1);
            rows[row] = end;
            busy.push(Reverse((end, row)));
            placed.push((lane, row));
        }
        let total_rows: usize = lane_rows.iter().map(|r| r.len().max(1)).sum();
        let row_h = (560.0 / total_rows.max(1) as f64).clamp(1.0, 14.0);
        let mut lane_top = Vec::with_capacity(lane_rows.len());
        let mut y = TOP;
        for rows in &lane_rows {
            lane_top.push(y);
            y += rows.len().max(1) as f64 * row_h + LANE_GAP;
        }
        Self {
            lane_rows,
            placed,
            lane_top,
            row_h,
            plot_bottom: y,
            t0,
            t1,
        }
    }

    fn span(&self) -> u64 {
        (self.t1 - self.t0).max(1)
    }

    fn x(&self, t: u64) -> f64 {
        LEFT + (t - self.t0) as f64 / self.span() as f64 * PLOT
    }

    fn lane_height(&self, lane: usize) -> f64 {
        self.lane_rows[lane].len().max(1) as f64 * self.row_h
    }
}

/// One decimal, as the picture's coordinates are written.
fn at(v: f64) -> String {
    format!("{v:.1}")
}

fn draw(
    header: &JobHeader,
    job_name: &str,
    executors: &BTreeMap<String, u32>,
    mut bars: Vec<Bar>,
) -> String {
    let layout = Layout::of(&mut bars, executors.len());
    let height = format!("{:.0}", layout.plot_bottom + 70.0);
    // Every element is closed with `{}`: SVG is XML, where maud's void
    // form (`rect;`, no closing tag) would not parse.
    let svg = html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox={ "0 0 " (WIDTH) " " (height) } font-family="sans-serif" font-size="12" {
            style {
                ".Successful{fill:#3b8c3b}.Failed{fill:#c43c35}"
                ".Running{fill:#e0a526}.tick{stroke:#ddd}.lane{fill:#f6f6f6}"
            }
            (draw_title(header, job_name, bars.len(), executors.len(), &layout))
            (draw_lanes(executors, &layout))
            (draw_ticks(&layout))
            (draw_bars(&bars, &layout))
            (draw_legend(&layout))
        }
    };
    let mut svg = svg.into_string();
    svg.push('\n');
    svg
}

fn draw_title(
    header: &JobHeader,
    job_name: &str,
    tasks: usize,
    executors: usize,
    layout: &Layout,
) -> Markup {
    let title = if job_name.is_empty() {
        format!("Job {}", header.job_id)
    } else {
        format!("Job {} ({job_name})", header.job_id)
    };
    let span = duration(layout.t1.saturating_sub(layout.t0));
    html! {
        text x="10" y="22" font-size="15" font-weight="bold" { (xml_text(&title)) }
        text x="10" y="42" {
            (header.state.status_word()) ": " (tasks) " tasks on " (executors) " executors over " (span)
        }
    }
}

/// A lane per executor, labelled.
fn draw_lanes(executors: &BTreeMap<String, u32>, layout: &Layout) -> Markup {
    html! {
        @for (name, &i) in executors {
            @let top = layout.lane_top[i as usize];
            @let h = layout.lane_height(i as usize);
            rect class="lane" x=(LEFT) y=(at(top)) width=(PLOT) height=(at(h)) {}
            text x=(format!("{:.0}", LEFT - 8.0)) y=(at(top + h / 2.0)) text-anchor="end"
                dominant-baseline="middle" { (xml_text(&shorten(name, 28))) }
        }
    }
}

/// Time ticks, as offsets from the first task's start.
fn draw_ticks(layout: &Layout) -> Markup {
    let span = layout.span();
    let step = tick_step(span);
    let bottom = layout.plot_bottom;
    let ticks = (0..=span).step_by(step as usize);
    html! {
        @for t in ticks {
            @let x = at(LEFT + t as f64 / span as f64 * PLOT);
            line class="tick" x1=(x) y1=(TOP) x2=(x) y2=(at(bottom)) {}
            text x=(x) y=(at(bottom + 16.0)) text-anchor="middle" { "+" (duration(t)) }
        }
    }
}

/// One bar per task attempt, with its facts as a tooltip.
fn draw_bars(bars: &[Bar], layout: &Layout) -> Markup {
    let row_h = layout.row_h;
    let h = at((row_h - if row_h > 3.0 { 1.0 } else { 0.0 }).max(1.0));
    html! {
        @for (b, &(lane, row)) in bars.iter().zip(&layout.placed) {
            @let w = ((b.end - b.start) as f64 / layout.span() as f64 * PLOT).max(1.0);
            @let y = layout.lane_top[lane] + row as f64 * row_h;
            rect class={ "task " (b.status) } x=(at(layout.x(b.start))) y=(at(y)) width=(at(w)) height=(h) {
                title {
                    "stage " (b.stage_id) " task " (b.task_id) ": " (b.status) ", "
                    (duration(b.end - b.start))
                }
            }
        }
    }
}

fn draw_legend(layout: &Layout) -> Markup {
    let ly = layout.plot_bottom + 44.0;
    html! {
        @for (i, status) in ["Successful", "Failed", "Running"].iter().enumerate() {
            @let x = LEFT + i as f64 * 120.0;
            rect class={ "key " (status) } x=(x) y=(at(ly - 10.0)) width="12" height="12" {}
            text x=(x + 18.0) y=(at(ly)) { (status) }
        }
    }
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let head: String = text.chars().take(max - 1).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bjh_format::record::kind;
    use bjh_format::record::{TaskMetrics, encode_line};
    use std::path::Path;

    fn task(stage: u32, id: u32, exec: &str, start: u64, end: u64, ok: bool) -> Vec<u8> {
        encode_line(
            kind::TASK_END,
            &TaskEnd {
                stage_id: stage,
                task_id: id,
                executor_id: exec.into(),
                status: if ok {
                    TaskStatus::Successful
                } else {
                    TaskStatus::Failed {
                        reason: "r".into(),
                        error: "e".into(),
                    }
                },
                launch_time: start,
                start_exec_time: start,
                end_exec_time: end,
                metrics: TaskMetrics {
                    input_rows: 10,
                    output_rows: 5,
                    elapsed_compute_nanos: 7,
                },
                stage_attempt: 0,
            },
        )
        .unwrap()
    }

    fn header(state: JobState, dropped: Option<u64>) -> JobHeader {
        JobHeader {
            job_id: "j".into(),
            state,
            start_time: 1000,
            end_time: 0,
            dropped_records: dropped,
            query_hash: 0,
        }
    }

    fn log(dir: &Path, tasks: usize, end: bool) -> std::path::PathBuf {
        let mut bytes = encode_line(
            kind::JOB_START,
            &JobStart {
                job_id: "j".into(),
                job_name: "<evil & name>".into(),
                ..Default::default()
            },
        )
        .unwrap();
        for i in 0..tasks {
            let start = 1000 + i as u64 * 3;
            let exec = format!("exec-{}", i % 3);
            bytes.extend(task(
                1 + (i % 2) as u32,
                i as u32,
                &exec,
                start,
                start + 10,
                i != 4,
            ));
        }
        if end {
            bytes.extend_from_slice(b"{\"ev\":\"JobEnd\",\"version\":1,\"data\":{}}\n");
        } else {
            bytes.extend_from_slice(b"{\"ev\":\"TaskEnd\",\"vers"); // torn
        }
        let path = dir.join("j.eventlog");
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// Regression: rows were found by a linear walk over the lane's rows,
    /// so 150,000 overlapping tasks took seconds to place.
    #[test]
    fn rows_are_the_first_free_ones_and_as_few_as_tasks_ever_overlap() {
        // A pseudo-random mix over three executors, placed against the
        // first-fit walk the layout used before and against the largest
        // overlap counted directly.
        let mut seed = 7u64;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        let mut bars: Vec<Bar> = (0..2_000)
            .map(|i| {
                let start = next(10_000);
                Bar {
                    executor: next(3) as u32,
                    stage_id: 1,
                    task_id: i,
                    start,
                    end: start + next(400),
                    status: "Successful",
                }
            })
            .collect();
        let layout = Layout::of(&mut bars, 3);
        let mut walk: Vec<Vec<u64>> = vec![Vec::new(); 3];
        for (b, &(lane, row)) in bars.iter().zip(&layout.placed) {
            let rows = &mut walk[b.executor as usize];
            let first = rows
                .iter()
                .position(|&end| end <= b.start)
                .unwrap_or(rows.len());
            if first == rows.len() {
                rows.push(0);
            }
            rows[first] = b.end.max(b.start + 1);
            assert_eq!((lane, row), (b.executor as usize, first));
        }
        for lane in 0..3u32 {
            let mine: Vec<&Bar> = bars.iter().filter(|b| b.executor == lane).collect();
            let most = mine
                .iter()
                .map(|b| {
                    mine.iter()
                        .filter(|o| o.start <= b.start && b.start < o.end.max(o.start + 1))
                        .count()
                })
                .max()
                .unwrap();
            assert_eq!(layout.lane_rows[lane as usize].len(), most);
        }
        // Equal tasks: one row each, placed at once.
        let mut equal: Vec<Bar> = (0..150_000)
            .map(|i| Bar {
                executor: 0,
                stage_id: 1,
                task_id: i,
                start: 5,
                end: 9,
                status: "Successful",
            })
            .collect();
        assert_eq!(Layout::of(&mut equal, 1).lane_rows[0].len(), 150_000);
    }

    #[test]
    fn pages_count_every_task_and_keep_only_the_page() {
        let dir = tempfile::tempdir().unwrap();
        let path = log(dir.path(), 25, true);
        let t = read_timeline(
            &path,
            &header(JobState::Completed, Some(0)),
            TimelineParams {
                limit: 10,
                offset: 20,
            },
        )
        .unwrap();
        assert_eq!(t.total_tasks, 25);
        assert_eq!(t.tasks.len(), 5);
        assert_eq!(t.tasks[0].task_id, 20);
        assert!(t.complete);
        assert_eq!(t.stages.len(), 2);
        assert_eq!(t.stages.iter().map(|s| s.tasks).sum::<u64>(), 25);
        assert_eq!(t.stages.iter().map(|s| s.failed_tasks).sum::<u64>(), 1);
        assert_eq!(t.stages[0].start_time, 1000);
        assert_eq!(t.job_name, "<evil & name>");
    }

    #[test]
    fn dropped_records_or_an_unfinished_job_make_it_incomplete() {
        let dir = tempfile::tempdir().unwrap();
        let path = log(dir.path(), 3, false);
        let t = read_timeline(&path, &header(JobState::Running, None), Default::default()).unwrap();
        assert_eq!(t.total_tasks, 3, "the torn line is skipped");
        assert!(!t.complete);
        assert_eq!(t.stages[0].status, "Running");
        let path = log(dir.path(), 3, true);
        let t = read_timeline(
            &path,
            &header(JobState::Completed, Some(2)),
            Default::default(),
        )
        .unwrap();
        assert!(!t.complete);
    }

    #[test]
    fn the_picture_has_one_bar_per_task_and_escapes_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = log(dir.path(), 40, true);
        let svg = render_svg(&path, &header(JobState::Completed, Some(0))).unwrap();
        assert_eq!(svg.matches("<rect class=\"task ").count(), 40);
        assert_eq!(svg.matches("<rect class=\"task Failed\"").count(), 1);
        assert!(svg.contains("&lt;evil &amp; name&gt;"));
        assert!(!svg.contains("<evil"));
    }

    #[test]
    fn ticks_read_well() {
        assert_eq!(tick_step(1), 1);
        assert_eq!(tick_step(95_000), 10_000);
        assert!(86_400_000 / tick_step(86_400_000) <= 10);
    }
}
