//! Integration tests: one binary, one module per area. They drive the real
//! `ballista-scheduler` binary, a real executor and the `ballista` client.

mod alerts;
mod browse;
mod browser;
mod bucket;
mod crash;
mod disk;
mod dropin;
mod durability;
mod events;
mod explain;
mod faults;
mod flags;
mod graph;
mod harness;
mod history;
mod hostile;
mod isolation;
mod library;
mod live;
mod mcp;
mod moto;
mod neighbours;
mod openapi;
mod record;
mod routes;
mod security;
mod several;
mod sql;
mod tidy;
mod tpch;
mod traces;
mod ui;
