//! The job-level series of `GET /api/metrics` that describe the history
//! as it is (the counters of jobs as they finish are the store's, in
//! [`HistoryMetrics`](bjh_metrics::HistoryMetrics)):
//!
//! - `ballista_job_history_jobs{status, scheduler_id}`: jobs in the
//!   history by state, failed and abandoned among them, and by the
//!   scheduler that ran them (empty for logs that do not say; past
//!   [`MAX_SCHEDULER_LABELS`] schedulers, the ones with fewest jobs are
//!   summed under `(other)`), read from the catalog's tallies at each
//!   scrape (O(unfinished logs + schedulers), not O(jobs));
//! - for the recurring queries with the most runs (the top N, N from
//!   `--metrics-top-queries`, so the series stay few whatever the
//!   history holds), labelled `query_hash`, `job_name` and `query_label`
//!   (the label made from the plan, empty when none is known; one value
//!   per hash, so it adds no series): the last run's
//!   duration, its ratio to the median of the runs before it, whether that
//!   is a regression (`/api/queries`' rule: a `slower` trend) and the
//!   number of runs;
//! - `ballista_job_history_slots{scheduler_id}`: the task slots up now,
//!   from each scheduler's cluster log, and
//!   `ballista_job_history_slot_utilisation{scheduler_id}`: the share of
//!   the last hour's slot time its jobs used (`/api/usage`'s rule); both
//!   worked out on a thread of their own at most every ten seconds while
//!   scraped (a bucket's cluster logs are read with blocking requests), at
//!   most [`MAX_SCHEDULER_LABELS`] schedulers, the rest under `(other)` for
//!   slots (utilisation is not summed across schedulers).
//!
//! Grouping the queries is a pass over every job, so a scrape never does
//! it: a scrape that finds the history changed since the last grouping
//! starts one on a thread of its own (one at a time, at most every
//! `REGROUP_EVERY`) and answers what the last grouping found. A scrape
//! costs the same at a million jobs as at ten (`benches/scale.rs`).
//!
//! Each server has its own [`JobGauges`], over its own store: they are not
//! registered in Prometheus' default registry (two servers in one process,
//! an embedder's, would share one set, pointed at whichever attached
//! last). `/api/metrics` answers the default registry's series (the
//! scheduler's and the process's counters) and the server's own gauges
//! (`router::metrics`), in both modes.

use bjh_analysis::queries::{QueryRow, most_runs, recurring_top};
use bjh_format::JobState;
use bjh_store::LogStore;
use bjh_store::query::JobFacts;
use parking_lot::{Mutex, RwLock};
use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, IntGaugeVec, Opts};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The least time between two groupings of the queries.
pub(crate) const REGROUP_EVERY: Duration = Duration::from_secs(10);
/// The least time between two workings-out of the usage series.
const USAGE_EVERY: Duration = Duration::from_secs(10);

/// The default N of `--metrics-top-queries`.
pub const DEFAULT_TOP_QUERIES: usize = 20;

/// The longest `job_name` label (in characters); longer names are cut.
const MAX_NAME_LABEL: usize = 100;

/// Schedulers with series of their own; the rest share `(other)` (a
/// directory of logs naming a new scheduler each cannot multiply series).
pub const MAX_SCHEDULER_LABELS: usize = 100;

/// The label of the schedulers past [`MAX_SCHEDULER_LABELS`]: no scheduler
/// id can be it (ids have no parentheses).
pub const OTHER_SCHEDULERS: &str = "(other)";

/// The job-level series of one server over `store`, exporting the `top`
/// recurring queries with the most runs (0: none).
pub fn gauges(store: Arc<LogStore>, top: usize) -> Arc<JobGauges> {
    let gauges = Arc::new(JobGauges::new());
    *gauges.target.write() = Some((store, top));
    gauges
}

/// The series and what they read.
pub struct JobGauges {
    target: RwLock<Option<(Arc<LogStore>, usize)>>,
    /// Held by a scrape from the reset of `jobs` to its collection, so a
    /// concurrent scrape never sees them half written.
    scrape: Mutex<()>,
    jobs: IntGaugeVec,
    usage: Arc<UsageGauges>,
    queries: Arc<QueryGauges>,
}

/// The usage series, written on a thread of their own (a bucket's cluster
/// logs are read with blocking requests, never on the server's runtime) at
/// most every [`USAGE_EVERY`], read by scrapes.
struct UsageGauges {
    slots: IntGaugeVec,
    utilisation: GaugeVec,
    /// When the last working-out started, and whether one is under way.
    state: Mutex<Option<(Instant, bool)>>,
}

impl UsageGauges {
    fn maybe_refresh(self: Arc<Self>, store: Arc<LogStore>) {
        {
            let mut state = self.state.lock();
            if let Some((at, running)) = *state
                && (running || at.elapsed() < USAGE_EVERY)
            {
                return;
            }
            *state = Some((Instant::now(), true));
        }
        let this = self.clone();
        let spawned = std::thread::Builder::new()
            .name("history-usage".into())
            .spawn(move || {
                let now = bjh_format::now_millis();
                let cluster = store.cluster(now);
                let mut up: std::collections::BTreeMap<&str, i64> = Default::default();
                for i in cluster.intervals.iter().filter(|i| i.to >= now) {
                    *up.entry(&i.scheduler_id).or_default() += i64::from(i.slots);
                }
                let mut up: Vec<(&str, i64)> = up.into_iter().collect();
                up.sort_by_key(|(id, n)| (std::cmp::Reverse(*n), *id));
                let used = utilisation_last_hour(&store, &cluster.intervals, now);
                this.slots.reset();
                for (i, (id, n)) in up.into_iter().enumerate() {
                    let label = if i >= MAX_SCHEDULER_LABELS {
                        OTHER_SCHEDULERS
                    } else {
                        id
                    };
                    this.slots.with_label_values(&[label]).add(n);
                }
                this.utilisation.reset();
                for (id, x) in used {
                    this.utilisation.with_label_values(&[id.as_str()]).set(x);
                }
                if let Some((_, running)) = this.state.lock().as_mut() {
                    *running = false;
                }
            });
        if let Err(e) = spawned {
            log::warn!("job-level metrics: cannot work out the usage: {e}");
            *self.state.lock() = None;
        }
    }
}

/// The per-query series, written by a grouping and read by scrapes.
struct QueryGauges {
    last_duration: GaugeVec,
    ratio: GaugeVec,
    regressed: IntGaugeVec,
    runs: IntGaugeVec,
    /// Held while the four are rewritten, and while they are collected,
    /// so a scrape sees one grouping whole.
    writing: Mutex<()>,
    state: Mutex<Grouping>,
}

#[derive(Default)]
struct Grouping {
    /// The store version the last grouping read.
    version: Option<u64>,
    /// When it started.
    at: Option<Instant>,
    /// Whether one is under way.
    running: bool,
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help)
}

impl JobGauges {
    fn new() -> Self {
        let labels = &["query_hash", "job_name", "query_label"];
        Self {
            target: RwLock::new(None),
            scrape: Mutex::new(()),
            jobs: IntGaugeVec::new(
                opts(
                    "ballista_job_history_jobs",
                    "Jobs in the history by state (unfinished logs included: queued, running, abandoned)",
                ),
                &["status", "scheduler_id"],
            )
            .expect("valid metric"),
            usage: Arc::new(UsageGauges {
                slots: IntGaugeVec::new(
                    opts(
                    "ballista_job_history_slots",
                    "Task slots up now, by scheduler, from its cluster log",
                ),
                &["scheduler_id"],
            )
            .expect("valid metric"),
                utilisation: GaugeVec::new(
                    opts(
                        "ballista_job_history_slot_utilisation",
                        "The share (0 to 1) of the last hour's slot time up that a scheduler's jobs used",
                    ),
                    &["scheduler_id"],
                )
                .expect("valid metric"),
                state: Mutex::new(None),
            }),
            queries: Arc::new(QueryGauges {
                last_duration: GaugeVec::new(
                    opts(
                        "ballista_job_history_query_last_duration_seconds",
                        "The last run's duration of a recurring query (the top N by runs)",
                    ),
                    labels,
                )
                .expect("valid metric"),
                ratio: GaugeVec::new(
                    opts(
                        "ballista_job_history_query_duration_ratio",
                        "A recurring query's last run's duration over the median of the (up to nine) runs before it; absent with fewer than three runs",
                    ),
                    labels,
                )
                .expect("valid metric"),
                regressed: IntGaugeVec::new(
                    opts(
                        "ballista_job_history_query_regressed",
                        "1 when a recurring query's last run is a regression by /api/queries' rule (ratio at or over 1.25), else 0",
                    ),
                    labels,
                )
                .expect("valid metric"),
                runs: IntGaugeVec::new(
                    opts(
                        "ballista_job_history_query_runs",
                        "Finished runs of a recurring query in the history",
                    ),
                    labels,
                )
                .expect("valid metric"),
                writing: Mutex::new(()),
                state: Mutex::new(Grouping::default()),
            }),
        }
    }

    /// Reads the state counts and, when the history changed, starts a
    /// grouping of the queries.
    fn refresh(&self) {
        let Some((store, top)) = self.target.read().clone() else {
            return;
        };
        let mut by_scheduler = store.counts_by_scheduler();
        by_scheduler
            .sort_by_key(|(id, c)| (id.is_none(), std::cmp::Reverse(c.iter().sum::<usize>())));
        let mut series: Vec<(String, [usize; 6])> = Vec::new();
        for (i, (id, counts)) in by_scheduler.into_iter().enumerate() {
            let label = match id {
                None => String::new(),
                Some(_) if i >= MAX_SCHEDULER_LABELS => OTHER_SCHEDULERS.to_string(),
                Some(id) => id.to_string(),
            };
            match series.iter_mut().find(|(l, _)| *l == label) {
                Some((_, sum)) => sum.iter_mut().zip(counts).for_each(|(s, c)| *s += c),
                None => series.push((label, counts)),
            }
        }
        self.jobs.reset();
        for (label, counts) in &series {
            for (word, state) in JobState::ALL {
                self.jobs
                    .with_label_values(&[word, label.as_str()])
                    .set(counts[state.index()] as i64);
            }
        }
        self.usage.clone().maybe_refresh(store.clone());
        self.queries.clone().maybe_regroup(store, top);
    }
}

/// The utilisation of each scheduler over the last hour (at most
/// [`MAX_SCHEDULER_LABELS`], those with the most slots).
fn utilisation_last_hour(
    store: &LogStore,
    intervals: &[bjh_store::cluster::SlotInterval],
    now: u64,
) -> Vec<(String, f64)> {
    use bjh_analysis::usage::{UsageJob, usage};
    let from = now.saturating_sub(3_600_000);
    let mut schedulers: Vec<(&str, u64)> = Vec::new();
    for i in intervals {
        match schedulers.iter_mut().find(|(id, _)| *id == i.scheduler_id) {
            Some((_, n)) => *n += u64::from(i.slots),
            None => schedulers.push((&i.scheduler_id, u64::from(i.slots))),
        }
    }
    schedulers.sort_by_key(|(id, n)| (std::cmp::Reverse(*n), *id));
    schedulers.truncate(MAX_SCHEDULER_LABELS);
    let jobs = store.ran_between(from, now);
    schedulers
        .into_iter()
        .filter_map(|(id, _)| {
            let intervals: Vec<_> = intervals
                .iter()
                .filter(|i| i.scheduler_id == id)
                .cloned()
                .collect();
            let mine: Vec<UsageJob> = jobs
                .iter()
                .filter(|j| j.scheduler_id() == Some(id))
                .filter_map(|j| {
                    Some(UsageJob {
                        key: String::new(),
                        start: j.start_time(),
                        end: j.end_time(),
                        busy_slot_ms: j.usage()?.busy_slot_ms,
                        waited_ms: 0,
                    })
                })
                .collect();
            let u = usage(&intervals, &mine, 0, (from, now), None);
            u.utilisation.map(|x| (id.to_string(), x))
        })
        .collect()
}

impl QueryGauges {
    fn clear(&self) {
        self.last_duration.reset();
        self.ratio.reset();
        self.regressed.reset();
        self.runs.reset();
    }

    /// Starts a grouping on a thread of its own when the store changed
    /// since the last one, none is under way, and the last started at
    /// least [`REGROUP_EVERY`] ago.
    fn maybe_regroup(self: Arc<Self>, store: Arc<LogStore>, top: usize) {
        let version = store.version();
        {
            let mut state = self.state.lock();
            let due = state.at.is_none_or(|at| at.elapsed() >= REGROUP_EVERY);
            if state.running || state.version == Some(version) || !due {
                return;
            }
            state.running = true;
            state.at = Some(Instant::now());
        }
        let this = self.clone();
        let spawned = std::thread::Builder::new()
            .name("history-metrics".into())
            .spawn(move || {
                let (_, rows) = store.with_completed_by_query(1..=u64::MAX, |jobs| {
                    recurring_top(jobs, top, most_runs)
                });
                this.publish(rows);
                let mut state = this.state.lock();
                state.version = Some(version);
                state.running = false;
            });
        if let Err(e) = spawned {
            log::warn!("job-level metrics: cannot start a grouping: {e}");
            self.state.lock().running = false;
        }
    }

    /// Replaces the series with `rows`'.
    fn publish(&self, rows: Vec<QueryRow>) {
        let _writing = self.writing.lock();
        self.clear();
        for row in rows {
            let name: String = row.job_name.chars().take(MAX_NAME_LABEL).collect();
            let label = row.query_label.as_deref().unwrap_or("");
            let labels = [row.query_hash.as_str(), name.as_str(), label];
            if let Some(last) = row.recent.last() {
                self.last_duration
                    .with_label_values(&labels)
                    .set(last.duration_ms as f64 / 1000.0);
            }
            if let Some(ratio) = row.trend_ratio {
                self.ratio.with_label_values(&labels).set(ratio);
            }
            self.regressed
                .with_label_values(&labels)
                .set(i64::from(row.trend == "slower"));
            self.runs.with_label_values(&labels).set(row.runs as i64);
        }
    }
}

impl JobGauges {
    /// The series as they are now (the state counts read, a grouping
    /// started when the history changed).
    pub fn families(&self) -> Vec<MetricFamily> {
        let _scrape = self.scrape.lock();
        self.refresh();
        let q = &self.queries;
        let _writing = q.writing.lock();
        let mut out = self.jobs.collect();
        out.extend(self.usage.slots.collect());
        out.extend(self.usage.utilisation.collect());
        out.extend(q.last_duration.collect());
        out.extend(q.ratio.collect());
        out.extend(q.regressed.collect());
        out.extend(q.runs.collect());
        // A family with no series yet (before the first grouping) is left
        // out, as a registry's gather leaves it out: the text encoder
        // refuses one.
        out.retain(|f| !f.get_metric().is_empty());
        out
    }
}
