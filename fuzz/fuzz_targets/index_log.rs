//! The index path: arbitrary bytes as a log file, rescanned, listed, read.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    bjh_serving::fuzzing::index_log(data);
});
