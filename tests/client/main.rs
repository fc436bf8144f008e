//! The Rust client library across processes and threads: `fork()` and inherited handles,
//! the thread it does not start, wake descriptors, idempotent creates, a job's state read
//! by the injector that pushed it and the counters' handle lanes.
//!
//! One test binary (`cargo test -p xtcq-tests --test client`), one module per feature: a
//! new test of this area goes into the module of its feature, or a new module declared
//! here. A test that re-runs this binary as a child process selects its test with `--exact`
//! and `xtcq_testkit::test_name(module_path!(), ...)`, since the names libtest gives carry
//! the module's path. The modules' tests run in parallel threads of one process: no fixed
//! names, ports or users, and no `std::env::set_var`.

xtcq_testkit::test_threads_per_core!();

mod create_exist_ok;
mod exist_ok_other_user;
mod fork_drop_client;
mod fork_drop_job;
mod fork_go_on;
mod fork_inherited_ops;
mod fork_reconnect;
mod handle_lanes;
mod job_state;
mod no_threads;
mod wake_fd;
mod wake_herd;

/// The wake descriptor kinds this host offers: the datagram always, the futex kind where the
/// kernel allows io_uring futex waits (else recorded as a skip).
fn wake_kinds() -> Vec<xtcq_client::WakeKind> {
    match xtcq_shm::futex_ring::FutexRing::new() {
        Ok(_) => vec![xtcq_client::WakeKind::Futex, xtcq_client::WakeKind::Datagram],
        Err(e) => {
            xtcq_testkit::skipped(&format!("futex-kind wake descriptors: {e}"));
            vec![xtcq_client::WakeKind::Datagram]
        }
    }
}
