//! The `xtcq` command line end to end against a real `xtcqd`: its subcommands, durations,
//! delayed jobs, dead letters, payload blocks, quotas and limits, and what it says on bad
//! input.
//!
//! One test binary (`cargo test -p xtcq-tests --test cli`), one module per feature: a new
//! test of this area goes into the module of its feature, or a new module declared here. A
//! test that re-runs this binary as a child process selects its test with `--exact` and
//! `xtcq_testkit::test_name(module_path!(), ...)`, since the names libtest gives carry the
//! module's path. The modules' tests run in parallel threads of one process: no fixed
//! names, ports or users, and no `std::env::set_var`.

xtcq_testkit::test_threads_per_core!();

mod closed_stdout;
mod commands;
mod dead_bulk;
mod delayed;
mod delayed_bad_input;
mod durations;
mod help;
mod job_id;
mod large_payloads;
mod limits;
mod payload_blocks;
mod quota;
mod quota_export_metrics_attacks;
mod room;
mod socket_env_empty;
mod steal_slow_reader;
mod strays;
