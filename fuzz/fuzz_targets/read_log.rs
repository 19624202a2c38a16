//! The single-record path: arbitrary bytes as a log file, each reader.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ballista_job_history::bench_support::fuzzing::read_log(data);
});
