//! A Ballista executor process: upstream's own (`ballista-executor`'s
//! `executor_process`), nothing of ours, for a cluster on one machine and
//! for the tests that stop an executor the way an operator does. On
//! `SIGINT` or `SIGTERM` it tells the scheduler it is terminating (a
//! heartbeat, then `executor_stopped`) and exits.
//!
//! ```text
//! cargo run --example executor -- SCHEDULER_PORT SLOTS FLIGHT_PORT GRPC_PORT
//! ```

use ballista_core::config::TaskSchedulingPolicy;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut next = |default: &str| args.next().unwrap_or_else(|| default.to_string());
    let scheduler_port: u16 = next("50050").parse()?;
    let vcores: usize = next("2").parse()?;
    let port: u16 = next("50051").parse()?;
    let grpc_port: u16 = next("50052").parse()?;
    let config = ExecutorProcessConfig {
        bind_host: "127.0.0.1".into(),
        external_host: Some("127.0.0.1".into()),
        port,
        grpc_port,
        scheduler_host: "127.0.0.1".into(),
        scheduler_port,
        vcores,
        // As the scheduler's default: executors poll for work.
        task_scheduling_policy: TaskSchedulingPolicy::PullStaged,
        ..ExecutorProcessConfig::default()
    };
    start_executor_process(Arc::new(config)).await?;
    Ok(())
}
