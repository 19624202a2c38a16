//! TPC-H's data and queries for the real-query tests: the eight tables
//! from PyPI's `tpchgen-cli` as Parquet, and the 22 queries
//! (`tests/fixtures/tpch/`). Shared by `tpch.rs` (in the `it` binary) and
//! the what-if grading (the `grading` binary, which runs alone so that its
//! timings are not another test's).

use datafusion::prelude::ParquetReadOptions;
use std::path::Path;

const TABLES: [&str; 8] = [
    "customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier",
];

/// Writes the eight tables at scale factor `scale` as Parquet into `dir`.
pub fn generate(dir: &Path, scale: &str) {
    let status = std::process::Command::new("tpchgen-cli")
        .args(["parquet", "-s", scale, "--output-dir"])
        .arg(dir)
        .status()
        .expect("tpchgen-cli runs (pip install tpchgen-cli)");
    assert!(status.success());
}

/// Registers the eight tables of `dir` with `ctx`.
pub async fn register(ctx: &datafusion::prelude::SessionContext, dir: &Path) {
    for table in TABLES {
        let path = dir.join(format!("{table}.parquet"));
        ctx.register_parquet(table, path.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
    }
}

/// The text of TPC-H query `q`.
pub fn query(q: u32) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tpch");
    std::fs::read_to_string(dir.join(format!("q{q}.sql"))).unwrap()
}
