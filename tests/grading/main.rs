//! The what-if grading, a test binary of its own: its figures are the
//! times of real runs on cluster shapes of one and two task slots, and
//! two slots are only two when no other test shares the machine's cores.
//! Cargo runs test binaries one after another, so nothing else runs
//! beside it (in the `it` binary, tests run in parallel and the grading
//! once missed its targets in CI because of them). Its modules are the
//! `it` binary's own files.

#![allow(clippy::disallowed_methods)] // scratch files and test channels
#![allow(dead_code)] // the shared harness serves the `it` binary too

#[path = "../it/harness.rs"]
mod harness;
#[path = "../it/tpch_data.rs"]
mod tpch_data;
#[path = "../it/whatif.rs"]
mod whatif;
