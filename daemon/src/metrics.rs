//! What the daemon tells of the segment.
//!
//! - `stats`: the counts `xtcq stats` shows, read without stopping anyone;
//! - [`http`]: the same as Prometheus text at `GET /metrics` (`--metrics ADDR`).

pub mod http;
mod requests;
mod stats;
