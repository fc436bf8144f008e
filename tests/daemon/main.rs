//! `xtcqd` itself: its control channel and framing, configuration and flags, segment sizes,
//! queue deletion, idle handling, logs, resumed processes, and the systemd units.
//!
//! One test binary (`cargo test -p xtcq-tests --test daemon`), one module per feature: a
//! new test of this area goes into the module of its feature, or a new module declared
//! here. A test that re-runs this binary as a child process selects its test with `--exact`
//! and `xtcq_testkit::test_name(module_path!(), ...)`, since the names libtest gives carry
//! the module's path. The modules' tests run in parallel threads of one process: no fixed
//! names, ports or users, and no `std::env::set_var`.

xtcq_testkit::test_threads_per_core!();

mod config_file;
mod control;
mod delete;
mod e2e;
mod fdstore;
mod framing;
mod idle;
mod idle_scan;
mod log_format;
mod many_queues;
mod payload_blocks_flag;
mod resume;
mod segment_size;
mod size_flags;
mod startup_errors;
mod state_file;
mod systemd_units;
