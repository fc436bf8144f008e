//! Limits: what one user, or one queue, may take of the daemon's and the segment's room.
//!
//! - [`connections`]: connections per uid (`--max-connections-per-uid`);
//! - [`share`]: queue-table entries and job records per uid (`--queues-per-uid`,
//!   `--records-per-uid`);
//! - [`quota`]: a queue's record quota, dead-letter cap and concurrency limit
//!   (`xtcq limits`), kept by the scan.

pub mod connections;
pub mod quota;
mod requests;
pub mod share;
