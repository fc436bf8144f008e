//! The one harness of xtcq's cross-process tests and benchmarks (as iceoryx2 keeps
//! `tests-common`): real daemons on temporary sockets and segments, real child processes,
//! and the one way to wait for them.
//!
//! Rules every test that uses it keeps:
//! - Every daemon and child is a guard that kills it when dropped: a failing test leaves no
//!   process behind.
//! - Every wait has a deadline that fails the test with what the child printed, instead of
//!   hanging the run; no deadline is a timing claim.
//! - The binaries under test are the ones cargo built for the running package
//!   ([`exe`]): `xtcq-test-daemon`, `xtcq-test-cli`, `xtcq-test-bridge` are the real
//!   `main`s of `xtcqd`, `xtcq` and `xtcq-bridge`, compiled as binaries of `xtcq-tests`.
//! - Segment sizes are named ([`sizes`]), never spelled out in a test.

pub mod bridge;
pub mod c_program;
pub mod child;
pub mod cpu;
pub mod daemon;
pub mod exe;
pub mod fork;
pub mod line_chain;
pub mod metrics_http;
pub mod postgres;
pub mod python;
pub mod rng;
pub mod role;
pub mod runs;
pub mod scribble;
pub mod sizes;
pub mod skip;
pub mod threads;
pub mod tmux;
pub mod users;

pub use c_program::{compile_c, workspace_root};
pub use child::{
    code, eventually, first_line_seen, ok, run_bounded, run_within, stderr, stdout, wait_bounded,
    wait_timeout, wait_until,
};
pub use daemon::{run_daemon_once, spawn_daemon, Daemon, DaemonBuilder};
pub use exe::{artifact_dir, xtcq, xtcq_exe, xtcqd, xtcqd_exe};
pub use fork::{fork_child, in_forked_child, wait_forked};
pub use metrics_http::{scrape_metrics, METRICS_ON_ANY_PORT};
pub use rng::Rng;
pub use role::{child_entry, env_or, hold, out, spawn_role, spawn_role_with, test_name, Role};
pub use sizes::{large_payload_segment, MEDIUM_SEGMENT, SMALL_SEGMENT, TINY_SEGMENT};
pub use skip::{require_or_skip, skipped};
pub use tmux::Tmux;
pub use users::{is_root, SystemUser};
/// CLOCK_MONOTONIC in ns, the clock every process on the host shares (the engine's own).
pub use xtcq_client::monotonic_ns;
