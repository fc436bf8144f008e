//! The shapes of work beyond one line of jobs, with real `xtcqd` and `xtcq` processes: priority
//! levels, batches that say when they are done, and unique jobs (a key held while the job is
//! live), through kill -9 and daemon restarts.
//!
//! One test binary (`cargo test -p xtcq-tests --test shapes`), one module per feature: a new
//! test of this area goes into the module of its feature, or a new module declared here. The
//! modules' tests run in parallel threads of one process: no fixed names, ports or users, and
//! no `std::env::set_var`.

xtcq_testkit::test_threads_per_core!();

mod batches;
mod priorities;
mod unique;
