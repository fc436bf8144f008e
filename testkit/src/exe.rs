//! Where the binaries under test are: beside the running test or bench executable, in the
//! profile directory cargo builds into (`target/debug` for `target/debug/deps/NAME-HASH`).
//!
//! - Cargo builds a package's binaries only for that package's own tests and benches, so the
//!   tests' copies live in `xtcq-tests` (`xtcq-test-daemon`, `xtcq-test-cli`,
//!   `xtcq-test-bridge`) and the benches' in `xtcq-benches` (`xtcq-bench-daemon`).
//! - A binary that is not there fails the test with the command that builds it.

use std::path::PathBuf;
use std::process::Command;

/// The daemon's binary name in the tests' package.
pub const TEST_DAEMON: &str = "xtcq-test-daemon";
/// The command line's binary name in the tests' package.
pub const TEST_CLI: &str = "xtcq-test-cli";
/// The bridge's binary name in the tests' package.
pub const TEST_BRIDGE: &str = "xtcq-test-bridge";

/// The directory cargo puts this build's artifacts in (`target/debug`), found from the
/// running test executable (`target/debug/deps/NAME-HASH`).
pub fn artifact_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps directory");
    deps.parent().expect("profile directory").to_path_buf()
}

/// `name` in [`artifact_dir`]; fails the test when cargo did not build it.
pub fn built(name: &str) -> PathBuf {
    let p = artifact_dir().join(name);
    assert!(
        p.is_file(),
        "{} not found: it is built by `cargo test -p xtcq-tests` (or `cargo bench -p xtcq-benches`)",
        p.display()
    );
    p
}

/// The daemon the tests run (`xtcqd`'s own entry point, with the fail points).
pub fn xtcqd_exe() -> PathBuf {
    built(TEST_DAEMON)
}

/// The `xtcq` command line the tests run.
pub fn xtcq_exe() -> PathBuf {
    built(TEST_CLI)
}

/// The `xtcq-bridge` the tests run.
pub fn bridge_exe() -> PathBuf {
    built(TEST_BRIDGE)
}

/// A command for the daemon, with no socket or segment chosen yet.
pub fn xtcqd() -> Command {
    Command::new(xtcqd_exe())
}

/// A command for `xtcq`, with nothing from the caller's environment choosing its daemon.
pub fn xtcq() -> Command {
    let mut c = Command::new(xtcq_exe());
    c.env_remove("XTCQ_SOCKET").env_remove("XTCQ_SEGMENT");
    c
}

/// A directory holding this build's `xtcq`, `xtcqd`, `xtcq-bridge`, `libxtcq.so` and
/// `libxtcq.a` under their installed names (what `make install NO_BUILD=1 BIN=...` takes):
/// the tests' copies of the three `main`s and the C library cargo built for the tests,
/// linked (or copied) there, so that an install test runs what the other tests run and no
/// second build is needed.
pub fn installable_binaries() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let built_for_tests = [
        (TEST_CLI, "xtcq"),
        (TEST_DAEMON, "xtcqd"),
        (TEST_BRIDGE, "xtcq-bridge"),
        ("deps/libxtcq.so", "libxtcq.so"),
        ("deps/libxtcq.a", "libxtcq.a"),
    ];
    for (built_as, name) in built_for_tests {
        let from = built(built_as);
        let to = dir.path().join(name);
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to)
                .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
        }
    }
    dir
}
