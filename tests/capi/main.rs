//! The C API from C programs compiled with the system's `cc` against `include/xtcq.h` and
//! `libxtcq.a`: status codes, batch push, no allocation on the job path, resource limits,
//! threads, and the push that makes no system call.
//!
//! One test binary (`cargo test -p xtcq-tests --test capi`), one module per feature: a new
//! test of this area goes into the module of its feature, or a new module declared here. A
//! test that re-runs this binary as a child process selects its test with `--exact` and
//! `xtcq_testkit::test_name(module_path!(), ...)`, since the names libtest gives carry the
//! module's path. The modules' tests run in parallel threads of one process: no fixed
//! names, ports or users, and no `std::env::set_var`.

xtcq_testkit::test_threads_per_core!();

mod block_classes;
mod inject_many;
mod no_alloc;
mod no_syscall_push;
mod programs;
mod push_batch;
mod push_batch_delete;
mod resource_limits;
mod shared_threads;
