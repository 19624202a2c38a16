//! Pictures: what the pages draw, as SVG from typed templates (`maud`,
//! every text escaped). The stage graph and the query profile from the
//! stored DOT (`graph`: read into stages, operators and edges, laid out in
//! layers with long edges routed beside the boxes), the task timeline
//! (`timeline`: its rows read from a log, and its picture), and the one
//! way durations and counts are written (`words`).
//!
//! **Rule:** this layer imports `format` and `store` (a timeline is read
//! from a log); it knows nothing of HTTP, and only `serving` and the
//! process above it import it.
//!
//! **Invariant:** no picture's work grows faster than its input: timeline
//! rows are placed in O(n log n), a graph is laid out in near-linear time
//! and not drawn past 2,000 boxes.

#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod graph;
pub mod timeline;
pub mod words;
