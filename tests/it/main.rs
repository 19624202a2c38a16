//! Integration tests: one binary, one module per area. They drive the real
//! `ballista-scheduler` binary, a real executor and the `ballista` client.

mod harness;
mod record;
