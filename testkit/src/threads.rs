//! How many tests of an area run at once: two a core, not libtest's one.
//!
//! Most of these tests wait rather than compute: on daemons, child processes, leases, a
//! NATS server's backoff. With one test thread a core, a 2-core machine ran the waiting
//! areas (bridge, work, cli, flow, access, crash, client, daemon) mostly idle. Each area's
//! `main.rs` says [`test_threads_per_core!`], which sets `RUST_TEST_THREADS` before `main`
//! (before libtest reads it, and before any thread exists) unless it is set already: a
//! `RUST_TEST_THREADS` or `--test-threads` of your own still decides.

/// Test threads a core.
pub const PER_CORE: usize = 2;

/// Sets `RUST_TEST_THREADS` to [`PER_CORE`] a core if it is unset. Called from the
/// process's constructors (`.init_array`) by [`test_threads_per_core!`]: one thread, no
/// other reader of the environment yet.
pub extern "C" fn more_test_threads() {
    if std::env::var_os("RUST_TEST_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        std::env::set_var("RUST_TEST_THREADS", (cores * PER_CORE).to_string());
    }
}

/// In an area's `main.rs`: its tests run [`PER_CORE`] a core at once (see the module).
#[macro_export]
macro_rules! test_threads_per_core {
    () => {
        // Run by the loader before `main`, as C constructors are.
        #[used]
        #[link_section = ".init_array"]
        static XTCQ_TEST_THREADS_PER_CORE: extern "C" fn() = $crate::threads::more_test_threads;
    };
}
