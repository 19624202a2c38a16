//! The library entry point: a recording scheduler on an already-bound
//! listener, stopped by its shutdown future.

use crate::harness::*;
use ballista_core::config::TaskSchedulingPolicy;
use ballista_job_history::{HistoryOptions, run_scheduler};
use ballista_scheduler::config::SchedulerConfig;
use std::sync::Arc;

type Server = tokio::task::JoinHandle<Result<(), ballista_job_history::ServerError>>;

/// A recording scheduler started through the library entry point on a
/// bound loopback listener (its config adjusted by `adjust`), with an
/// executor; stopped when the sender is used or dropped.
async fn embedded(
    logs: &std::path::Path,
    adjust: impl FnOnce(SchedulerConfig) -> SchedulerConfig,
) -> (u16, tokio::sync::oneshot::Sender<()>, Server) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = adjust(
        SchedulerConfig::default()
            .with_hostname("127.0.0.1")
            .with_port(port)
            .with_scheduler_policy(TaskSchedulingPolicy::PullStaged),
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(run_scheduler(
        listener,
        config,
        Some(HistoryOptions::new(logs)),
        async {
            let _ = stop_rx.await;
        },
    ));
    start_executor(port).await;
    (port, stop_tx, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_embedded_scheduler_records_and_drains_on_shutdown() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let data = write_csv(tmp.path(), "t.csv", 300);
    let (port, stop_tx, server) = embedded(&logs, |config| config).await;
    let ctx = client(port, &data).await;
    let batches = ctx
        .sql("SELECT k, count(*) FROM t GROUP BY k")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 100);

    // Shut down as soon as the client has its answer: the job's log is
    // complete when `run_scheduler` returns, with no waiting on our side.
    stop_tx.send(()).unwrap();
    let finished = tokio::time::timeout(DEADLINE, server).await;
    finished
        .expect("the scheduler stops")
        .unwrap()
        .expect("a clean shutdown");
    // The logs (the snapshot of the list is saved beside them on shutdown,
    // now that the store takes in each log as it completes).
    let snapshot = bjh_store::snapshot::DEFAULT_FILE_NAME;
    let completed: Vec<_> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| {
            name != snapshot
                && name != bjh_columnar::shared::FOLDER
                && name != bjh_recording::scheduler_id::FILE_NAME
                && name != bjh_format::cluster::CLUSTER_DIR
        })
        .collect();
    assert_eq!(completed.len(), 1, "{completed:?}");
    // The cluster log beside it: the executor came, and went with the
    // scheduler's stop, written before `run_scheduler` returned.
    let cluster: String = std::fs::read_dir(logs.join(bjh_format::cluster::CLUSTER_DIR))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(cluster.contains("\"ExecutorUp\""), "{cluster}");
    assert!(
        cluster.contains("\"reason\":\"scheduler stopped\""),
        "{cluster}"
    );
    assert!(completed[0].ends_with(".eventlog"), "{completed:?}");
    let text = std::fs::read_to_string(logs.join(&completed[0])).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert_whole(&lines);
    // The scheduler keeps its id beside the logs, and the log names it.
    let id = std::fs::read_to_string(logs.join(bjh_recording::scheduler_id::FILE_NAME))
        .expect("the scheduler id is kept in the directory");
    let id = id.trim();
    assert!(bjh_recording::scheduler_id::invalid(id).is_none(), "{id:?}");
    let footer: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(footer["data"]["scheduler_id"], id, "{footer}");
}

/// Holds planning of the jobs whose plan mentions a marker until the test
/// opens that marker's gate: a job waiting here is one the scheduler lists
/// as queued (accepted, not started). Plugged in through upstream's own
/// extension point, the session builder's query planner.
#[derive(Debug)]
struct PlanningGate {
    gates: Vec<(&'static str, Arc<tokio::sync::Semaphore>)>,
}

impl PlanningGate {
    fn new(markers: &[&'static str]) -> Self {
        let gates = markers
            .iter()
            .map(|m| (*m, Arc::new(tokio::sync::Semaphore::new(0))))
            .collect();
        Self { gates }
    }

    fn open(&self, marker: &str) {
        let (_, gate) = self.gates.iter().find(|(m, _)| *m == marker).unwrap();
        gate.add_permits(1);
    }
}

#[async_trait::async_trait]
impl datafusion::execution::context::QueryPlanner for PlanningGate {
    async fn create_physical_plan(
        &self,
        plan: &datafusion::logical_expr::LogicalPlan,
        state: &dyn datafusion::catalog::Session,
    ) -> datafusion::error::Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        use datafusion::physical_planner::PhysicalPlanner;
        let text = plan.display_indent().to_string();
        let gate = self.gates.iter().find(|(m, _)| text.contains(m));
        if let Some((_, gate)) = gate {
            gate.acquire().await.expect("never closed").forget();
        }
        datafusion::physical_planner::DefaultPhysicalPlanner::default()
            .create_physical_plan(plan, state)
            .await
    }
}

/// `GET /api/jobs` as (id, start time) pairs.
async fn listed(port: u16, query: &str) -> Vec<(String, u64)> {
    let list = get_json(&format!("http://127.0.0.1:{port}/api/jobs{query}")).await;
    list.as_array()
        .unwrap()
        .iter()
        .map(|j| {
            let id = j["job_id"].as_str().unwrap().to_string();
            (id, j["start_time"].as_u64().unwrap())
        })
        .collect()
}

/// Paging a live scheduler's list with a cursor neither skips nor repeats
/// a job while queued jobs start: the default order's key (the queue time)
/// does not change over a job's life. Under the former key, the start
/// time, a queued job sorted as the newest and moved when it started, and
/// this walk lost a job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cursor_walk_is_stable_while_queued_jobs_start() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let data = write_csv(tmp.path(), "t.csv", 300);
    let gate = Arc::new(PlanningGate::new(&["gate-one", "gate-two"]));
    let planner = gate.clone();
    let (port, _stop, _server) = embedded(&logs, |config| {
        let mut config = config.with_override_session_builder(Arc::new(move |config| {
            let state = ballista_core::utils::default_session_builder(config)?;
            Ok(
                datafusion::execution::SessionStateBuilder::new_from_existing(state)
                    .with_query_planner(planner.clone())
                    .build(),
            )
        }));
        // Finished jobs leave the scheduler's memory within a second, so
        // the walk also crosses jobs moving from the live view to their
        // logs.
        config.finished_job_state_clean_up_interval_seconds = 1;
        config
    })
    .await;
    let ctx = Arc::new(client(port, &data).await);
    ctx.sql("SELECT count(*) FROM t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let done = listed(port, "").await;
    assert_eq!(done.len(), 1, "{done:?}");

    // Two jobs wait in planning, queued one after the other.
    let mut clients = Vec::new();
    let mut queued = Vec::new();
    for marker in ["gate-one", "gate-two"] {
        let ctx = ctx.clone();
        let sql = format!("SELECT '{marker}' AS tag, count(*) FROM t");
        clients.push(tokio::spawn(async move {
            ctx.sql(&sql).await?.collect().await.map(|_| ())
        }));
        let id = wait_for("the job is listed as queued", || {
            let known: Vec<String> = queued.iter().map(|(id, _)| id).cloned().collect();
            async move {
                listed(port, "")
                    .await
                    .into_iter()
                    .find(|(id, start)| *start == 0 && !known.contains(id))
                    .map(|(id, _)| id)
            }
        })
        .await;
        queued.push((id, marker));
    }

    // The first page, taken while both wait: the last queued job.
    let first = listed(port, "?limit=1").await;
    assert_eq!(first.len(), 1);
    let mut seen = vec![first[0].0.clone()];
    // Start the first page's job first, then the other: the former order
    // then put the other job above the cursor.
    let on_page = queued.iter().position(|(id, _)| *id == seen[0]).unwrap();
    for i in [on_page, 1 - on_page] {
        let (id, marker) = &queued[i];
        gate.open(marker);
        eventually("the job starts", || async {
            listed(port, "")
                .await
                .iter()
                .any(|(listed, start)| listed == id && *start > 0)
        })
        .await;
    }
    for client in clients {
        client.await.unwrap().expect("the query succeeds");
    }

    // The rest of the walk, one job a page.
    loop {
        let page = listed(port, &format!("?limit=1&after={}", seen.last().unwrap())).await;
        match page.first() {
            Some((id, _)) => seen.push(id.clone()),
            None => break,
        }
        assert!(seen.len() <= 3, "the walk repeats a job: {seen:?}");
    }
    // Newest queued first: the second queued job, the first, the finished
    // one; each exactly once.
    let expected = [queued[1].0.clone(), queued[0].0.clone(), done[0].0.clone()];
    assert_eq!(seen, expected);
}
