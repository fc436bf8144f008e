//! Flow control: pausing a queue, its concurrency limit and a job's fate by id, with real
//! `xtcq work` consumers, kill -9 of holders and daemon restarts.
//!
//! One test binary (`cargo test -p xtcq-tests --test flow`), one module per feature: a new
//! test of this area goes into the module of its feature, or a new module declared here.
//! The modules' tests run in parallel threads of one process: no fixed names, ports or
//! users, and no `std::env::set_var`.

xtcq_testkit::test_threads_per_core!();

mod cancel;
mod cancel_races;
mod job;
mod pause;
mod rate;
mod rate_races;
mod running;
