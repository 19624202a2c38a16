//! The cluster engine: a query run as a Ballista job on a cluster's own
//! executors (`{"sql": ..., "engine": "cluster"}`), for questions one
//! process cannot answer in time.
//!
//! The worker still plans and answers it, under the same read-only
//! options, row and byte limits and answer formats as the local engine;
//! only the execution moves. Its session is Ballista's client session
//! (`ballista-core`'s `upgrade_for_ballista`, what `SessionContext::remote`
//! builds, without the `ballista` crate's in-process scheduler and
//! executor): the logical plan goes to the scheduler, which plans stages
//! and hands them to its executors, and the answer's batches come back
//! from them. Every table is Parquet read by absolute path: the columnar
//! history's segments, and the tables the server keeps in memory (`jobs`,
//! `usage`, `whatif`, `whatif_pairs`) written by the server for this one
//! query into a folder it removes afterwards (a logical plan carries no
//! in-memory table to a scheduler). The executors must see those paths:
//! the same machine as the server, or the folder on storage they share.
//!
//! The job is named [`JOB_NAME_PREFIX`]`: <the query's first line>`, so
//! the history lists it as the history's own. The worker cancels it when
//! the query's time runs out (the scheduler's `CancelJob`), a little
//! before the server would kill the worker; a job left running by a
//! worker killed for another reason (the server dying) runs to its end.

use ballista_core::extension::{SessionConfigExt, SessionStateExt};
use ballista_core::serde::protobuf::CancelJobParams;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// What names a job as the history's own query.
pub const JOB_NAME_PREFIX: &str = bjh_format::origin::HISTORY_JOB_PREFIX;

/// The cluster part of a worker's request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct OnCluster {
    /// The scheduler's gRPC address, `http://host:port`.
    pub(crate) scheduler: String,
    /// The job's name.
    pub(crate) job_name: String,
    /// How long the job may take before the worker cancels it.
    pub(crate) budget_ms: u64,
    /// Each table's files, relative to the request's root.
    pub(crate) tables: Tables,
    /// Jobs whose rows in the `jobs` base are left out (the request's
    /// `jobs_left_out`).
    #[serde(default)]
    pub(crate) jobs_left_out: Vec<String>,
}

/// The job name of `sql`: the prefix, then the query's first non-empty
/// line, at most 100 characters.
pub(crate) fn job_name(sql: &str) -> String {
    let first = sql.lines().map(str::trim).find(|l| !l.is_empty());
    let first: String = first.unwrap_or("").chars().take(100).collect();
    format!("{JOB_NAME_PREFIX}: {first}")
}

/// A scheduler's gRPC address from the forms an operator writes
/// (`df://host:port`, `http://host:port`, `host:port`): `http://host:port`.
pub fn scheduler_address(url: &str) -> Result<String, String> {
    let with_scheme = if url.contains("://") {
        url.to_string()
    } else {
        format!("df://{url}")
    };
    let parsed = url::Url::parse(&with_scheme)
        .map_err(|e| format!("{url:?} is not a scheduler URL (df://host:port): {e}"))?;
    if !matches!(parsed.scheme(), "df" | "http") {
        return Err(format!(
            "{url:?}: a scheduler is named df://host:port (or http://host:port)"
        ));
    }
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("{url:?} names no host"))?;
    let port = parsed
        .port()
        .ok_or_else(|| format!("{url:?} names no port (the scheduler's, e.g. 50050)"))?;
    if !parsed.path().trim_matches('/').is_empty() || parsed.query().is_some() {
        return Err(format!("{url:?}: only a host and a port, no path"));
    }
    Ok(format!("http://{host}:{port}"))
}

/// Each table's name and files.
pub(crate) type Tables = Vec<(String, Vec<String>)>;

/// The folder, under the columnar folder, of the tables staged for the
/// queries on a cluster (one folder per query, removed after it).
pub const STAGED_DIR: &str = "cluster-queries";

/// How old a staged folder must be before a starting server removes it:
/// one left by a server that died while its query ran (another server's
/// query over the same folder is never this old).
pub const STAGED_LEFTOVER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes the staged folders under `root` older than `age` (leftovers
/// of a server that died mid-query), and the `jobs` files as old
/// (`jobs_file`); says how many.
pub fn sweep(root: &Path, age: std::time::Duration) -> usize {
    [STAGED_DIR, crate::jobs_file::JOBS_DIR]
        .iter()
        .map(|dir| sweep_folder(&root.join(dir), age))
        .sum()
}

fn sweep_folder(parent: &Path, age: std::time::Duration) -> usize {
    // A link planted in its place is never followed: nothing it names is
    // removed.
    if !std::fs::symlink_metadata(parent).is_ok_and(|m| m.is_dir()) {
        return 0;
    }
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let now = std::time::SystemTime::now();
    let mut removed = 0;
    for entry in entries.flatten() {
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        let old = meta
            .modified()
            .is_ok_and(|t| now.duration_since(t).unwrap_or_default() >= age);
        // `remove_dir_all` and `remove_file` remove a link itself, never
        // what it names.
        let gone = match old {
            false => false,
            true if meta.is_dir() => std::fs::remove_dir_all(entry.path()).is_ok(),
            true => std::fs::remove_file(entry.path()).is_ok(),
        };
        removed += usize::from(gone);
    }
    removed
}

/// Writes `rows` (the tables the server holds in memory), and an empty
/// file for each table with no files, as Parquet into a fresh folder
/// under `root`; gives the folder (removed when dropped) and every
/// table's files relative to `root`. `jobs_files` (the completed jobs'
/// rows, already a file: `jobs_file`) are read beside the staged `jobs`
/// rows.
pub(crate) fn stage(
    root: &Path,
    files: &[Vec<String>; 3],
    jobs_files: &[String],
    rows: crate::worker::Rows,
) -> Result<(tempfile::TempDir, Tables), String> {
    use datafusion::arrow::compute::concat_batches;
    let parent = shared_folder(root, STAGED_DIR)?;
    let folder = tempfile::Builder::new()
        .prefix("q")
        .tempdir_in(&parent)
        .map_err(|e| e.to_string())?;
    readable_by_others(folder.path())?;
    let relative = |name: &str| {
        let file = folder.path().join(format!("{name}.parquet"));
        let shown = file.strip_prefix(root).unwrap_or(&file);
        (file.clone(), shown.to_string_lossy().into_owned())
    };
    let mut tables = Vec::new();
    let in_memory = [
        ("jobs", rows.jobs),
        ("usage", rows.usage),
        ("whatif", rows.whatif),
        ("whatif_pairs", rows.pairs),
    ];
    for (name, batches) in in_memory.into_iter().chain(
        bjh_columnar::TABLES
            .iter()
            .enumerate()
            .filter(|&(t, _)| files[t].is_empty())
            .map(|(_, (name, _))| (*name, Vec::new())),
    ) {
        let schema = schema_of(name).ok_or_else(|| format!("no table {name}"))?;
        let batch = concat_batches(&schema, &batches).map_err(|e| e.to_string())?;
        let (file, shown) = relative(name);
        bjh_columnar::write_file(&file, &schema, &batch).map_err(|e| e.to_string())?;
        let mut named = vec![shown];
        if name == "jobs" {
            named.extend(jobs_files.iter().cloned());
        }
        tables.push((name.to_string(), named));
    }
    for (t, (name, _)) in bjh_columnar::TABLES.iter().enumerate() {
        if !files[t].is_empty() {
            tables.push((name.to_string(), files[t].clone()));
        }
    }
    Ok((folder, tables))
}

/// The folder `name` under `root`, for files executors read: made when
/// missing; refused when a link or a file is in its place, so nothing is
/// written through it.
pub(crate) fn shared_folder(root: &Path, name: &str) -> Result<std::path::PathBuf, String> {
    let folder = root.join(name);
    match std::fs::symlink_metadata(&folder) {
        Ok(m) if m.is_dir() => return Ok(folder),
        Ok(_) => return Err(format!("{name} is not a folder (a link or a file)")),
        Err(_) => std::fs::create_dir_all(&folder).map_err(|e| e.to_string())?,
    }
    readable_by_others(&folder)?;
    Ok(folder)
}

/// Makes `folder` readable by others (0755): executors read what is in
/// it, as they read the segments (written 0644).
fn readable_by_others(folder: &Path) -> Result<(), String> {
    let mut perms = std::fs::symlink_metadata(folder)
        .map_err(|e| e.to_string())?
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(folder, perms).map_err(|e| e.to_string())
}

/// The scheduler's gRPC address from `scheduler` as an operator wrote it,
/// checked against `default` (the cluster engine as the default needs a
/// cluster).
pub fn setting(scheduler: Option<&str>, default: crate::Engine) -> Result<Option<String>, String> {
    let address = scheduler.map(scheduler_address).transpose()?;
    if default == crate::Engine::Cluster && address.is_none() {
        return Err(
            "the cluster engine as the default needs a cluster: name its scheduler (--sql-cluster)"
                .into(),
        );
    }
    Ok(address)
}

/// The schema of the table `name`.
fn schema_of(name: &str) -> Option<SchemaRef> {
    use bjh_columnar::tables;
    let schema = match name {
        "jobs" => &tables::JOBS,
        "usage" => &tables::USAGE,
        "whatif" => &crate::whatif::WHATIF,
        "whatif_pairs" => &crate::whatif::WHATIF_PAIRS,
        other => bjh_columnar::TABLES.iter().find(|(n, _)| *n == other)?.1,
    };
    Some((**schema).clone())
}

/// Ballista's client session over the tables: the memory pool for what
/// the worker itself holds, no disk, no catalog, each table a Parquet
/// listing over its files.
pub(crate) fn context(
    root: &Path,
    on: &OnCluster,
    memory: usize,
) -> datafusion::error::Result<SessionContext> {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(memory, 1.0)
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .build_arc()?;
    let mut config = SessionConfig::new_with_ballista()
        .with_information_schema(false)
        .with_ballista_job_name(&on.job_name);
    // Polling, the scheduler names the job as it accepts it (pushing, only
    // with its first status), so a job stuck in its queue can be cancelled.
    config
        .options_mut()
        .set(ballista_core::config::BALLISTA_CLIENT_PULL, "true")?;
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .build()
        .upgrade_for_ballista(on.scheduler.clone())?;
    let ctx = SessionContext::new_with_state(state);
    for (name, files) in &on.tables {
        let schema = schema_of(name)
            .ok_or_else(|| datafusion::error::DataFusionError::Plan(format!("no table {name}")))?;
        let urls = files
            .iter()
            .map(|f| ListingTableUrl::parse(root.join(f).to_string_lossy()))
            .collect::<Result<Vec<_>, _>>()?;
        let table = match name.as_str() {
            "jobs" => crate::worker::completed_jobs_table(urls, &on.jobs_left_out)?,
            _ => crate::worker::parquet_table(urls, schema)?,
        };
        ctx.register_table(name.as_str(), table)?;
    }
    Ok(ctx)
}

/// The job id of the Ballista job `plan` submitted, once it has.
pub(crate) fn job_id(plan: &Arc<dyn ExecutionPlan>) -> Option<String> {
    use ballista_core::execution_plans::DistributedQueryExec;
    use datafusion_proto::protobuf::LogicalPlanNode;
    let mut stack = vec![plan.clone()];
    while let Some(node) = stack.pop() {
        if let Some(exec) = node.downcast_ref::<DistributedQueryExec<LogicalPlanNode>>() {
            return exec.job_id().map(|id| id.to_string());
        }
        stack.extend(node.children().into_iter().cloned());
    }
    None
}

/// Asks the scheduler to cancel `job_id`; says whether it did.
pub(crate) async fn cancel(scheduler: &str, job_id: &str) -> bool {
    let Ok(mut client) = SchedulerGrpcClient::connect(scheduler.to_string()).await else {
        return false;
    };
    let params = CancelJobParams {
        job_id: job_id.to_string(),
    };
    client
        .cancel_job(params)
        .await
        .is_ok_and(|r| r.into_inner().cancelled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedulers_are_named_by_host_and_port_only() {
        for (given, want) in [
            ("df://sched:50050", "http://sched:50050"),
            ("http://10.0.0.1:8080", "http://10.0.0.1:8080"),
            ("localhost:50050", "http://localhost:50050"),
            ("df://[::1]:50050/", "http://[::1]:50050"),
        ] {
            assert_eq!(scheduler_address(given).as_deref(), Ok(want), "{given}");
        }
        for bad in [
            "df://sched",
            "s3://bucket/x",
            "df://:50050",
            "df://sched:50050/path",
            "df://sched:50050?x=1",
            "",
        ] {
            assert!(scheduler_address(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn staged_tables_are_written_for_executors_and_leftovers_swept() {
        let root = tempfile::tempdir().unwrap();
        let files: [Vec<String>; 3] = [vec![], vec!["tasks/seg-1.parquet".into()], vec![]];
        let kept = [format!("{}/jobs-kept.parquet", crate::jobs_file::JOBS_DIR)];
        let (folder, tables) =
            stage(root.path(), &files, &kept, crate::worker::Rows::default()).unwrap();
        // Seven tables: four held in memory and two empty ones written,
        // the one with segments named as it is.
        let mut names: Vec<&str> = tables.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "jobs",
                "operators",
                "stages",
                "tasks",
                "usage",
                "whatif",
                "whatif_pairs"
            ]
        );
        for (name, files) in &tables {
            let path = root.path().join(&files[0]);
            if name == "tasks" {
                assert_eq!(files, &["tasks/seg-1.parquet"]);
            } else {
                // The completed jobs' file is read beside the staged rows.
                let beside: &[String] = if name == "jobs" { &kept } else { &[] };
                assert_eq!(&files[1..], beside, "{name}");
                assert!(path.starts_with(folder.path()), "{name}: {path:?}");
                assert!(path.is_file(), "{name}");
            }
        }
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::symlink_metadata(folder.path())
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o755);
        // A folder in use is young: kept. Any age: swept.
        assert_eq!(sweep(root.path(), STAGED_LEFTOVER), 0);
        assert!(folder.path().is_dir());
        let kept = folder.keep();
        assert_eq!(sweep(root.path(), std::time::Duration::ZERO), 1);
        assert!(!kept.exists());
        assert_eq!(
            sweep(&root.path().join("none"), std::time::Duration::ZERO),
            0
        );

        // A link planted in the folder's place: nothing it names is staged
        // into or removed.
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir(elsewhere.path().join("precious")).unwrap();
        let planted = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), planted.path().join(STAGED_DIR)).unwrap();
        assert_eq!(sweep(planted.path(), std::time::Duration::ZERO), 0);
        assert!(elsewhere.path().join("precious").is_dir());
        let refused = stage(planted.path(), &files, &[], crate::worker::Rows::default());
        assert!(refused.is_err_and(|e| e.contains("not a folder")));
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_job_is_named_by_the_first_line_of_its_query() {
        assert_eq!(
            job_name("\n  SELECT count(*)\nFROM jobs"),
            "history SQL: SELECT count(*)"
        );
        assert_eq!(job_name(&"x".repeat(500)).chars().count(), 113);
        for name in [
            "jobs",
            "usage",
            "whatif",
            "whatif_pairs",
            "stages",
            "tasks",
            "operators",
        ] {
            assert!(schema_of(name).is_some(), "{name}");
        }
        assert!(schema_of("secrets").is_none());
    }
}
