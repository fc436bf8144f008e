//! Dumps: `xtcq export`/`import`, `--export-on-stop`/`--import-on-start`, older segment
//! layouts, and dumps an import must refuse.
//!
//! One test binary (`cargo test -p xtcq-tests --test dump`), one module per feature: a new
//! test of this area goes into the module of its feature, or a new module declared here. A
//! test that re-runs this binary as a child process selects its test with `--exact` and
//! `xtcq_testkit::test_name(module_path!(), ...)`, since the names libtest gives carry the
//! module's path. The modules' tests run in parallel threads of one process: no fixed
//! names, ports or users, and no `std::env::set_var`.

xtcq_testkit::test_threads_per_core!();

mod export_import;
mod export_target;
mod export_tmp_file;
mod import_attacks;
mod import_checks;
mod import_v5;
mod quota_words;
mod restart;
