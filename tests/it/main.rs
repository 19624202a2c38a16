//! Integration tests: one binary, one module per area. They drive the real
//! `ballista-scheduler` binary, a real executor and the `ballista` client.

#![allow(clippy::disallowed_methods)] // scratch files and test channels

mod alerts;
mod browse;
mod browser;
mod bucket;
mod crash;
mod decision;
mod disk;
mod doors;
mod dropin;
mod durability;
mod embedded;
mod events;
mod explain;
mod faults;
mod flags;
mod fleet_sql;
mod graph;
mod guards;
mod harness;
mod history;
mod hostile;
mod isolation;
mod labels;
mod ledger;
mod library;
mod live;
mod mcp;
mod moto;
mod neighbours;
mod openapi;
mod planted;
mod published;
mod races;
mod record;
mod replays;
mod routes;
mod security;
mod several;
mod shares;
mod spilled;
mod sql;
mod stopping;
mod tidy;
mod tpch;
mod tpch_data;
mod traces;
mod ui;
mod usage;
