//! `libxtcq`: xtcq's C API (`include/xtcq.h`), over `xtcq-client`.
//!
//! Rules every entry point keeps:
//! - returns an `int` status: `XTCQ_OK` (0), `XTCQ_EMPTY` (1: nothing there, not an error),
//!   or a negative `XTCQ_E_*`; the message is read with `xtcq_last_error` (per thread);
//! - never unwinds into C: a panic is caught and becomes `XTCQ_E_PANIC` ([`entry`]);
//! - never allocates on push, pop or steal: a job handle is made once and reused, and its
//!   payload buffer keeps its capacity;
//! - on a handle inherited across `fork()`, does nothing and returns `XTCQ_E_FORKED`
//!   (`xtcq_client::fork`); freeing such a handle in the child releases nothing the parent uses;
//! - blocking waits take a timeout in milliseconds, so a backend can wait in short steps and
//!   check for interrupts between them.
//!
//! Thread safety, per handle: `xtcq_client` and `xtcq_thief` may be used from several
//! threads at once; `xtcq_owner`, `xtcq_injector` and `xtcq_job` by one thread at a time
//! (any thread).

#![allow(non_camel_case_types)]

mod batches;
mod client;
mod entry;
mod flow;
mod inject_many;
/// Fork detection, shared with the Rust client.
use ::xtcq_client::fork;
mod job;
mod job_state;
mod producer;
mod report;
mod status;
mod thief;
mod unique;
mod wake;

pub use batches::*;
pub use client::*;
pub use flow::*;
pub use inject_many::*;
pub use job::*;
pub use job_state::*;
pub use producer::*;
pub use report::*;
pub use status::*;
pub use thief::*;
pub use unique::*;
pub use wake::*;
