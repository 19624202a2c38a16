//! The single-record path: arbitrary bytes as a log file, each reader.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    bjh_serving::fuzzing::read_log(data);
});
