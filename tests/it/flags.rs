//! Every flag either works or stops startup with a message that names it
//! and the fix: none is accepted only to do nothing.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the binary with `args`; it must exit (within a deadline) with a
/// failure, and its stderr must contain each of `says`.
fn refused(args: &[&str], says: &[&str]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
        .args(["--bind-host", "127.0.0.1", "--bind-port", "0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} was accepted: the process is still running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{args:?}");
    for s in says {
        assert!(err.contains(s), "{args:?}: {err}");
    }
}

#[test]
fn flags_that_would_do_nothing_are_refused_with_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    // Without --event-log-dir, none of ours has anything to act on.
    for (flag, value) in [
        ("--retain-interval", Some("1h")),
        ("--retain-dry-run", None),
        ("--history-index", Some("/tmp/x.index")),
        ("--no-history-index", None),
        ("--abandoned-after-seconds", Some("60")),
        ("--event-log-queue-capacity", Some("10")),
        ("--event-log-max-open-files", Some("10")),
        ("--update-interval-seconds", Some("5")),
        ("--retain-max-jobs", Some("5")),
        ("--event-log-compression", Some("zstd")),
        ("--object-store-timeout", Some("5s")),
        ("--sql-timeout-seconds", Some("5")),
        ("--sql-memory-limit", Some("64MiB")),
        ("--sql-max-rows", Some("10")),
        ("--sql-max-answer-bytes", Some("1MiB")),
        ("--sql-workers", Some("4")),
        ("--sql-queue", Some("2")),
        ("--sql-engine", Some("cluster")),
        ("--sql-cluster", Some("df://127.0.0.1:50050")),
        ("--export-parquet", Some("/tmp/out")),
        ("--metrics-top-queries", Some("5")),
        ("--otlp-endpoint", Some("http://127.0.0.1:4317")),
        ("--slot-hour-price", Some("0.05")),
        ("--usage-tags", Some("team")),
    ] {
        let mut args = vec![flag];
        args.extend(value);
        refused(&args, &[flag, "--event-log-dir"]);
    }
    // The cleaner runs only with a limit: a dry run or an interval alone
    // would run nothing.
    for flag in ["--retain-dry-run", "--retain-interval=1h"] {
        let name = flag.split('=').next().unwrap();
        refused(
            &["--event-log-dir", dir, flag],
            &[name, "--retain-max-jobs"],
        );
    }
    // A history-only server records nothing.
    for (flag, value) in [
        ("--event-log-queue-capacity", "10"),
        ("--event-log-max-open-files", "10"),
        ("--event-log-compression", "zstd"),
        ("--event-log-redact-pattern", "key"),
        ("--usage-tags", "team"),
    ] {
        refused(
            &["--history-only", "--event-log-dir", dir, flag, value],
            &[flag, "--history-only"],
        );
    }
    // The export is a history server's one-shot.
    refused(
        &["--event-log-dir", dir, "--export-parquet", "/tmp/out"],
        &["--export-parquet", "--history-only"],
    );
    // Traces: a scheduler sends each job as it ends; a history server
    // only as a one-shot.
    refused(
        &[
            "--event-log-dir",
            dir,
            "--otlp-endpoint",
            "http://127.0.0.1:4317",
            "--export-otlp",
        ],
        &["--export-otlp", "--history-only"],
    );
    refused(
        &[
            "--history-only",
            "--event-log-dir",
            dir,
            "--otlp-endpoint",
            "http://127.0.0.1:4317",
        ],
        &["--otlp-endpoint", "--export-otlp"],
    );
    refused(
        &["--history-only", "--event-log-dir", dir, "--export-otlp"],
        &["--otlp-endpoint"],
    );
    refused(
        &["--event-log-dir", dir, "--otlp-endpoint", "not a url"],
        &["--otlp-endpoint", "not a url"],
    );
    refused(
        &["--event-log-dir", dir, "--sql-memory-limit", "lots"],
        &["--sql-memory-limit"],
    );
    // Usage: a price is a number; a tag is never a redacted key.
    refused(
        &["--event-log-dir", dir, "--slot-hour-price", "cheap"],
        &["--slot-hour-price", "cheap"],
    );
    refused(
        &["--event-log-dir", dir, "--usage-tags", "team,my.secret.key"],
        &["--usage-tags", "my.secret.key", "redacted"],
    );
    // The scheduler id: recorded by a scheduler, so nothing to a
    // history-only server or without a directory; one id per scheduler;
    // only characters a label, a column and a filter take.
    refused(
        &["--scheduler-id", "eu-1"],
        &["--scheduler-id", "--event-log-dir"],
    );
    refused(
        &[
            "--history-only",
            "--event-log-dir",
            dir,
            "--scheduler-id",
            "eu-1",
        ],
        &["--scheduler-id", "records none"],
    );
    refused(
        &[
            "--event-log-dir",
            dir,
            "--scheduler-id",
            "eu-1",
            "--id",
            "eu-2",
        ],
        &["--scheduler-id eu-1", "--id eu-2"],
    );
    refused(
        &["--event-log-dir", dir, "--scheduler-id", "eu 1<script>"],
        &["--scheduler-id", "letters, digits"],
    );
    refused(
        &["--event-log-dir", dir, "--id", "a/b"],
        &["--scheduler-id", "not '/'"],
    );
    // Object-store flags on a local directory.
    refused(
        &["--event-log-dir", dir, "--object-store-timeout", "5s"],
        &["--object-store-timeout", "s3://"],
    );
    // Unfinished objects are leftovers at once: the age rule has no effect.
    refused(
        &[
            "--history-only",
            "--event-log-dir",
            "s3://bucket/prefix",
            "--abandoned-after-seconds",
            "60",
        ],
        &["--abandoned-after-seconds", "local directories"],
    );
}
