//! What the daemon reports: `xtcq stats`, `/metrics` (and who may read it) and `xtcq top`
//! in a real terminal.
//!
//! One test binary (`cargo test -p xtcq-tests --test metrics`), one module per feature: a
//! new test of this area goes into the module of its feature, or a new module declared
//! here. A test that re-runs this binary as a child process selects its test with `--exact`
//! and `xtcq_testkit::test_name(module_path!(), ...)`, since the names libtest gives carry
//! the module's path. The modules' tests run in parallel threads of one process: no fixed
//! names, ports or users, and no `std::env::set_var`.

xtcq_testkit::test_threads_per_core!();

mod exposure;
mod http_clients;
mod metrics;
mod stats_blocks;
mod stats_inline_size;
mod top;
mod top_blocks;
mod top_huge_terminal;
