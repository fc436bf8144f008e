//! Every example under `examples/` run for real against a real daemon, as its README says:
//! the Rust ones with `cargo run -p xtcq-examples --example NAME`, the C ones compiled with
//! `cc` against `include/xtcq.h` and `libxtcq.a`, the Python ones with the package's wheel
//! installed in a fresh venv. Each finds the daemon through `$XTCQ_SOCKET`, as a user's
//! program would, and must have run each of its jobs once, leaving none queued.
//!
//! Without python3's venv and pip or maturin the Python examples say they were skipped,
//! unless `XTCQ_REQUIRE_PYTHON=1` (set by CI), where that is a failure.

use std::process::{Command, Output};
use std::time::Duration;

use xtcq_testkit::python::{missing_python_tools, PythonEnv, WheelProfile};
use xtcq_testkit::*;

/// A cargo build of the examples on a cold target directory takes minutes on 2 cores.
const BUILD: Duration = Duration::from_secs(900);
const RUN: Duration = Duration::from_secs(120);

/// Checks that `out` succeeded and printed `ran PREFIX i` for each of its `n` jobs, and that
/// the example's queue holds nothing any more.
fn ran_each_once(what: &str, out: &Output, prefix: &str, n: usize, daemon: &Daemon) {
    let (text, err) = (stdout(out), stderr(out));
    assert_eq!(code(out), 0, "{what} failed:\nstdout:\n{text}\nstderr:\n{err}");
    for i in 0..n {
        let line = format!("ran {prefix} {i}");
        assert_eq!(text.lines().filter(|l| *l == line).count(), 1, "{what}: {line:?} once in:\n{text}");
    }
    assert_eq!(text.lines().count(), n, "{what} printed more than its jobs:\n{text}");
    let stats = daemon.stats();
    assert_eq!(stats["records"]["queued"].as_u64(), Some(0), "{what} left jobs queued: {stats}");
}

/// A daemon on its built-in defaults, as a user's `xtcqd &` runs: the examples create their
/// queues with the default deque capacity.
fn daemon() -> Daemon {
    Daemon::builder().daemon_defaults().start()
}

fn cargo_example(daemon: &Daemon, name: &str) -> Output {
    run_within(
        Command::new(env!("CARGO"))
            .args(["run", "--locked", "--quiet", "-p", "xtcq-examples", "--example", name])
            .current_dir(workspace_root())
            .env("XTCQ_SOCKET", &daemon.socket),
        BUILD,
    )
}

#[test]
fn the_rust_examples_run() {
    let daemon = daemon();
    let out = cargo_example(&daemon, "push_steal");
    ran_each_once("examples/rust/push_steal", &out, "job", 3, &daemon);
    let out = cargo_example(&daemon, "async_wait");
    ran_each_once("examples/rust/async_wait", &out, "async job", 3, &daemon);
}

#[test]
fn the_c_example_runs() {
    let daemon = daemon();
    let exe = compile_c("examples/c/push_steal/push_steal.c", daemon.dir(), &[]);
    // Once with the socket named, once found through $XTCQ_SOCKET.
    let out = run_within(Command::new(&exe).arg(&daemon.socket), RUN);
    ran_each_once("examples/c/push_steal", &out, "job", 3, &daemon);
    let out = run_within(Command::new(&exe).env("XTCQ_SOCKET", &daemon.socket), RUN);
    ran_each_once("examples/c/push_steal (XTCQ_SOCKET)", &out, "job", 3, &daemon);
}

#[test]
fn the_python_examples_run() {
    if let Some(why) = missing_python_tools() {
        let required = std::env::var("XTCQ_REQUIRE_PYTHON").is_ok_and(|v| v == "1");
        assert!(!required, "XTCQ_REQUIRE_PYTHON=1 but {why}");
        eprintln!("skipped: the Python examples: {why}");
        return;
    }
    let env = PythonEnv::build(WheelProfile::Dev);
    let daemon = daemon();
    for (script, prefix) in [
        ("examples/python/push_steal/push_steal.py", "job"),
        ("examples/python/asyncio/asyncio_steal.py", "async job"),
    ] {
        let out = run_within(
            env.command().arg(workspace_root().join(script)).env("XTCQ_SOCKET", &daemon.socket),
            RUN,
        );
        ran_each_once(script, &out, prefix, 3, &daemon);
    }
}
