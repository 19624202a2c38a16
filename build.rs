//! Finds which of the tools some integration tests need are missing, so
//! that those tests are compiled as ignored and `cargo test`'s summary line
//! counts them (`N ignored`), rather than passing without running.
//!
//! With `BALLISTA_JOB_HISTORY_NO_SKIPS` set (CI sets it), nothing is
//! ignored: a test whose tool is missing runs and fails, saying which.
//! The probes run when the tests are built; after installing a tool,
//! `touch build.rs` (or change `PATH`) to build them again.

use std::process::{Command, Stdio};

/// A cfg a test may be ignored under, and whether its tool is present.
type Probe = (&'static str, fn() -> bool);

fn probes() -> [Probe; 8] {
    [
        ("no_strace", || succeeds("strace", &["-V"])),
        // TPC-H data for the real-query test (PyPI's `tpchgen-cli`).
        ("no_tpchgen", || succeeds("tpchgen-cli", &["--version"])),
        // TPC-DS data for the decision-support workload (PyPI's `tpcgen-cli`).
        ("no_tpcgen", || succeeds("tpcgen-cli", &["--version"])),
        ("no_moto", || {
            succeeds("python3", &["-c", "import moto.server"])
        }),
        ("no_azurite", || {
            let binary = std::env::var("AZURITE_BLOB").unwrap_or_else(|_| "azurite-blob".into());
            succeeds(&binary, &["--version"])
                && succeeds("python3", &["-c", "import azure.storage.blob"])
        }),
        // The official MCP client (PyPI's `mcp`) the /mcp test talks through.
        ("no_mcp_client", || {
            succeeds("python3", &["-c", "import mcp, httpx2"])
        }),
        // The browser tests drive Debian's chromium through chromedriver.
        ("no_chromium", || {
            let browser = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
            let driver = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
            succeeds(&browser, &["--version"]) && succeeds(&driver, &["--version"])
        }),
        // Mounting a small tmpfs needs root (and CAP_SYS_ADMIN, which the
        // test itself finds out).
        ("no_root", || {
            Command::new("id")
                .arg("-u")
                .output()
                .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
        }),
    ]
}

fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    for var in [
        "BALLISTA_JOB_HISTORY_NO_SKIPS",
        "PATH",
        "AZURITE_BLOB",
        "CHROMIUM",
        "CHROMEDRIVER",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let strict = std::env::var_os("BALLISTA_JOB_HISTORY_NO_SKIPS").is_some();
    // A release build is the server binary (or the benches): no test of
    // it needs the tools, so none is started (starting Chromium, Node and
    // Python took 24 s in the measured release build). Tests built
    // in release count every tool's test as ignored.
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    for (cfg, present) in probes() {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if !strict && (release || !present()) {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}
