//! Dead letters: jobs that ran out of attempts, kept in their queue's dead-letter list until
//! they are re-queued or purged (`xtcq dead`).
//!
//! - `registry`: listing them a page at a time, re-queuing or purging many at once.

mod registry;
mod requests;
