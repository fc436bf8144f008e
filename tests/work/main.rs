//! `xtcq work`: the fence that keeps a job's command dead before the job runs again
//! (process groups, cgroups, other uids, a soak under kills), its summary, and commands
//! that cannot run or are stopped.
//!
//! One test binary (`cargo test -p xtcq-tests --test work`), one module per feature: a new
//! test of this area goes into the module of its feature, or a new module declared here. A
//! test that re-runs this binary as a child process selects its test with `--exact` and
//! `xtcq_testkit::test_name(module_path!(), ...)`, since the names libtest gives carry the
//! module's path. The modules' tests run in parallel threads of one process: no fixed
//! names, ports or users, and no `std::env::set_var`.

xtcq_testkit::test_threads_per_core!();

mod cannot_run;
mod cgroup_reuse;
mod fd_limit;
mod fence;
mod fence_cgroup;
mod fence_escape;
mod fence_other_uid;
mod fence_soak;
mod spawned;
mod stopped;
mod summary;
