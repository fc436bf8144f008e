//! Shared harness of the cross-crate tests and the IPC benchmark: start a real daemon on a
//! temporary socket and segment, and read CLOCK_MONOTONIC.
//!
//! The daemon binary is `xtcq-test-daemon` of this package (xtcqd's own `main` over the
//! `xtcqd` library); callers pass `env!("CARGO_BIN_EXE_xtcq-test-daemon")`, which cargo sets
//! only for this package's tests and benches.
//!
//! Invariants: the daemon is killed when its guard drops (a failing test leaves no process
//! behind), and waiting for it to be ready has a deadline that panics with its log.

pub mod bench;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running daemon in its own temporary directory.
pub struct Daemon {
    child: Option<Child>,
    /// Control socket.
    pub socket: PathBuf,
    /// Segment file.
    pub segment: PathBuf,
    /// The daemon's stderr.
    pub log: PathBuf,
    dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts `exe` with `--socket` and `--segment` in a fresh temporary directory and the
    /// segment sizes in `sizes` (flags as `xtcqd` takes them); returns once it accepts.
    pub fn start(exe: &Path, sizes: &[&str]) -> Daemon {
        assert!(
            exe.exists(),
            "daemon binary {} not found (cargo builds it with this package's tests and benches)",
            exe.display()
        );
        // /dev/shm when there is one: the segment then lives where xtcqd puts it by default.
        let base = Path::new("/dev/shm");
        let dir = if base.is_dir() { tempfile::tempdir_in(base) } else { tempfile::tempdir() }
            .expect("temporary directory");
        let socket = dir.path().join("xtcqd.sock");
        let segment = dir.path().join("segment");
        let log = dir.path().join("xtcqd.log");
        let logf = std::fs::File::create(&log).expect("daemon log file");
        let child = Command::new(exe)
            .arg("--socket")
            .arg(&socket)
            .arg("--segment")
            .arg(&segment)
            .args(sizes)
            .env("RUST_LOG", "info")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("XTCQ_SOCKET")
            .env_remove("XTCQ_SEGMENT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", exe.display()));
        let mut d = Daemon { child: Some(child), socket, segment, log, dir };
        d.wait_ready();
        d
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("daemon exited early ({st}); log:\n{}", self.log_text());
            }
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            assert!(Instant::now() < deadline, "daemon not ready in 20 s; log:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The temporary directory holding socket, segment and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// What the daemon wrote to stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A client connected to it.
    pub fn client(&self) -> xtcq_client::Client {
        xtcq_client::Client::connect(Some(&self.socket)).expect("connect to the daemon")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// CLOCK_MONOTONIC in ns (the vDSO; the same clock in every process on the host).
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's kernel id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Runs `cmd` to its end with stdout and stderr captured, killing it after `limit` (a hung
/// child fails the test with what it printed, instead of hanging the run). The one way the
/// tests of this package wait for a child.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> std::process::Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap_or_else(|e| panic!("waiting for {cmd:?}: {e}")),
        Err(_) => {
            // SAFETY: kill has no memory preconditions; `pid` is our unreaped child.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let out = rx.recv().expect("waiter thread").expect("wait after kill");
            panic!(
                "{cmd:?} did not finish in {limit:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The directory cargo puts this build's artifacts in (`target/debug`), found from the
/// running test executable (`target/debug/deps/NAME-HASH`).
pub fn artifact_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps directory");
    deps.parent().expect("profile directory").to_path_buf()
}
