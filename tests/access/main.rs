//! Access and trust across users: who may attach, push, steal, import or stop what; the
//! daemon's files, socket paths and segment file as a trust boundary
//! (docs/src/guarantees/threat-model.md).
//!
//! One test binary (`cargo test -p xtcq-tests --test access`), one module per feature: a
//! new test of this area goes into the module of its feature, or a new module declared
//! here. A test that re-runs this binary as a child process selects its test with `--exact`
//! and `xtcq_testkit::test_name(module_path!(), ...)`, since the names libtest gives carry
//! the module's path. The modules' tests run in parallel threads of one process: no fixed
//! names, ports or users, and no `std::env::set_var`.

xtcq_testkit::test_threads_per_core!();

mod cli_trust;
mod daemon_files;
mod quota_words;
mod segment_file;
mod socket_paths;
mod users;
