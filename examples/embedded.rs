//! A Ballista scheduler assembled by hand, with a plan codec of its own and
//! the job-history plugin: every job is recorded to a directory and served
//! from it (the REST routes, the web pages, SQL) beside the scheduler's own
//! gRPC, all on one port.
//!
//! ```text
//! cargo run --example embedded -- 50050 ./history
//! ```
//!
//! Executors connect to the port as to any scheduler; `SIGINT` or
//! `SIGTERM` stops it, recording the jobs under way as cancelled.

use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::serde::{
    BallistaCodec, BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec,
};
use ballista_job_history::{HistoryOptions, JobHistory};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_server::SchedulerServer;
use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::ScalarUDF;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The scheduler's own physical codec: Ballista's, counting the plans it
/// writes for executors (where a real one would add its own operators).
#[derive(Debug, Default)]
struct CountingCodec {
    inner: BallistaPhysicalExtensionCodec,
    encoded: AtomicU64,
}

impl PhysicalExtensionCodec for CountingCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.inner.try_decode(buf, inputs, ctx, converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        self.encoded.fetch_add(1, Ordering::Relaxed);
        self.inner.try_encode(node, buf, converter)
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        self.inner.try_decode_udf(name, buf)
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.inner.try_encode_udf(node, buf)
    }
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().as_deref().unwrap_or("50050").parse()?;
    let dir = args.next().unwrap_or_else(|| "./history".into());

    // The scheduler's config, and the plugin over the log directory: it
    // sets the scheduler id the logs record, and starts the writer.
    let mut config = SchedulerConfig::default()
        .with_hostname("127.0.0.1")
        .with_port(port)
        // Executors poll for work (as a standalone executor does).
        .with_scheduler_policy(TaskSchedulingPolicy::PullStaged);
    let history = JobHistory::new(HistoryOptions::new(&dir), &mut config)?;

    // The scheduler, built by hand: the plugin wraps its cluster (a job is
    // forgotten only once its log is stored) and its metrics collector
    // (the listener that sees jobs start and end).
    let codec = Arc::new(CountingCodec::default());
    let cluster = history.cluster(BallistaCluster::new_from_config(&config).await?);
    let collector = history.collector(ballista_scheduler::metrics::default_metrics_collector()?);
    let config = Arc::new(config);
    let mut scheduler = SchedulerServer::new(
        config.scheduler_endpoint(),
        cluster,
        BallistaCodec::new(
            Arc::new(BallistaLogicalExtensionCodec::default()),
            codec.clone(),
        ),
        config.clone(),
        collector,
    );
    scheduler.init().await?;

    // The background tasks start; the port serves gRPC (tapped: each
    // finished task is recorded), the job routes and the pages.
    let running = history.start(Arc::new(scheduler), config);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!(
        "listening on {}, recording to {dir}",
        listener.local_addr()?
    );
    running.serve(listener, stopped()).await?;
    let plans = codec.encoded.load(Ordering::Relaxed);
    println!("stopped; {plans} plans encoded by the scheduler's own codec");
    Ok(())
}

/// Resolves at the first `SIGINT` or `SIGTERM`.
async fn stopped() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
