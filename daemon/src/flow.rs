//! Flow: what lets a queue's jobs run, and what became of one.
//!
//! - `pause`: pausing and resuming a queue (`xtcq pause` / `resume`);
//! - `job_fate`: a job's record read for a user who may use its queue (`xtcq job`);
//! - `cancel`: a job withdrawn, or taken from its holder with its command fenced (`xtcq cancel`).
//!
//! A queue's concurrency limit (`max_running`) is set with its other limits
//! ([`crate::limits::quota`]).

mod cancel;
mod job_fate;
mod pause;
mod requests;
