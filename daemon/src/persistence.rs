//! What the daemon keeps on disk for the next daemon, and the dumps it reads at start.
//!
//! - [`state`]: the daemon-private state file `SOCKET.state` (process slots, queue
//!   permissions, fenced commands), which a restarted daemon trusts and nothing else;
//! - [`segment_memory`]: the record of the segment this daemon served, kept in the state
//!   file (older daemons kept it in `SOCKET.segment`), checked at the next start so that a
//!   lost segment is said, not silently replaced;
//! - `registry`: the registry's side of the state file, written under its lock;
//! - [`import`]: `--import-on-start`, a dump ([`xtcq_dump`]) written into the segment.

pub mod import;
mod registry;
pub mod segment_memory;
pub mod state;
