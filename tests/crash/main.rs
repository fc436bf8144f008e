//! Crashes and recovery: producers, consumers and the daemon killed at fail points, hostile
//! writers into the segment, and what the daemon recovers.
//!
//! One test binary (`cargo test -p xtcq-tests --test crash`), one module per feature: a new
//! test of this area goes into the module of its feature, or a new module declared here. A
//! test that re-runs this binary as a child process selects its test with `--exact` and
//! `xtcq_testkit::test_name(module_path!(), ...)`, since the names libtest gives carry the
//! module's path. The modules' tests run in parallel threads of one process: no fixed
//! names, ports or users, and no `std::env::set_var`.

xtcq_testkit::test_threads_per_core!();

mod blocks;
mod corrupt_deque;
mod delayed;
mod fd_limit_restart;
mod forged_header;
mod hostile_slots;
mod hostile_writer;
mod processes;
mod undated_claim;
