//! Test harness: start the real `xtcqd` binary on a temporary socket and segment, spawn this
//! test binary again as a child process in a named role, and read the child's `@@ ` lines.
//!
//! Invariants: every daemon and child is killed when its guard drops (a failing test leaves
//! no processes behind); every wait has a deadline that fails the test instead of hanging.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// Small segment sizes, so tests are fast and a full queue is easy to reach.
pub const SMALL: &[&str] = &[
    "--queues",
    "4",
    "--deques-per-queue",
    "4",
    "--deque-capacity",
    "1024",
    "--records",
    "16384",
    "--payload-bytes",
    "64",
    "--process-slots",
    "32",
    "--overflow-capacity",
    "16384",
];

/// A running `xtcqd`.
pub struct Daemon {
    pub child: Option<Child>,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub segment: PathBuf,
    pub log: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

pub fn xtcqd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xtcqd"))
}

impl Daemon {
    /// Starts a daemon with [`SMALL`] sizes and `extra` flags in a fresh temporary directory.
    pub fn start(extra: &[&str]) -> Daemon {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut d = Daemon::start_in(&dir, SMALL, extra);
        d._tmp = Some(tmp);
        d
    }

    /// Like [`start`](Self::start), with `env` set for the daemon (e.g. `XTCQ_FAILPOINTS`).
    pub fn start_env(extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut d = Daemon::start_in_env(&dir, SMALL, extra, env);
        d._tmp = Some(tmp);
        d
    }

    /// Starts a daemon whose files live in `dir` (to restart on the same paths).
    pub fn start_in(dir: &Path, sizes: &[&str], extra: &[&str]) -> Daemon {
        Daemon::start_in_env(dir, sizes, extra, &[])
    }

    /// [`start_in`](Self::start_in) with `env` set for the daemon.
    pub fn start_in_env(dir: &Path, sizes: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let socket = dir.join("xtcqd.sock");
        let segment = dir.join("segment");
        let log = dir.join(format!("xtcqd.{}.log", LOGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
        let child = spawn_daemon_env(&socket, &segment, &log, sizes, extra, env);
        let mut d = Daemon { child: Some(child), dir: dir.to_path_buf(), socket, segment, log, _tmp: None };
        d.wait_ready();
        d
    }

    /// Takes ownership of the temporary directory from another guard (for restarts).
    pub fn adopt_dir(&mut self, other: &mut Daemon) {
        self._tmp = other._tmp.take();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(st)) = child.try_wait() {
                    panic!("xtcqd exited early ({st}); log:\n{}", self.log_text());
                }
            }
            if self.socket.exists() && std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            assert!(Instant::now() < deadline, "xtcqd not ready in 10 s; log:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.pid() as libc::pid_t, sig);
        }
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit(Duration::from_secs(10))
    }

    pub fn wait_exit(&mut self, t: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("daemon running");
        let st = wait_timeout(&mut child, t)
            .unwrap_or_else(|| panic!("xtcqd did not exit; log:\n{}", self.log_text()));
        st
    }

    pub fn client(&self) -> xtcq_client::Client {
        xtcq_client::Client::connect(Some(&self.socket)).expect("connect")
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

static LOGS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub fn spawn_daemon(socket: &Path, segment: &Path, log: &Path, sizes: &[&str], extra: &[&str]) -> Child {
    spawn_daemon_env(socket, segment, log, sizes, extra, &[])
}

/// [`spawn_daemon`] with `env` set for the daemon.
pub fn spawn_daemon_env(
    socket: &Path,
    segment: &Path,
    log: &Path,
    sizes: &[&str],
    extra: &[&str],
    env: &[(&str, &str)],
) -> Child {
    let logf = std::fs::File::create(log).expect("log file");
    xtcqd()
        .envs(env.iter().copied())
        .arg("--socket")
        .arg(socket)
        .arg("--segment")
        .arg(segment)
        .args(sizes)
        .args(extra)
        .env("RUST_LOG", "info")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(logf)
        .spawn()
        .expect("spawn xtcqd")
}

/// Runs `xtcqd` to completion (for startup refusals); returns status and stderr.
pub fn run_daemon_once(
    socket: &Path,
    segment: &Path,
    sizes: &[&str],
    extra: &[&str],
) -> (ExitStatus, String) {
    let mut child = xtcqd()
        .arg("--socket")
        .arg(socket)
        .arg("--segment")
        .arg(segment)
        .args(sizes)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn xtcqd");
    let st = wait_timeout(&mut child, Duration::from_secs(10)).expect("xtcqd should exit");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    (st, err)
}

pub fn wait_timeout(child: &mut Child, t: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + t;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A child process running this test binary in a role.
pub struct Role {
    pub child: Option<Child>,
    pub lines: Receiver<String>,
}

/// Spawns this test binary as role `role` against `socket`, with `env`.
pub fn spawn_role(role: &str, socket: &Path, env: &[(&str, String)]) -> Role {
    spawn_role_with(role, socket, env, |_| {})
}

pub fn spawn_role_with(
    role: &str,
    socket: &Path,
    env: &[(&str, String)],
    f: impl FnOnce(&mut Command),
) -> Role {
    let mut c = Command::new(std::env::current_exe().expect("test exe"));
    c.args(["--exact", "child_main", "--nocapture", "--test-threads", "1"])
        .env("XTCQ_TEST_ROLE", role)
        .env("XTCQ_SOCKET", socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        c.env(k, v);
    }
    f(&mut c);
    let mut child = c.spawn().expect("spawn role");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            // libtest may print "test child_main ... " before our first line.
            if let Some(at) = line.find("@@ ") {
                if tx.send(line[at + 3..].to_string()).is_err() {
                    break;
                }
            }
        }
    });
    Role { child: Some(child), lines: rx }
}

impl Role {
    /// The next `@@ ` line, within `t`.
    pub fn line(&self, t: Duration) -> String {
        self.lines.recv_timeout(t).unwrap_or_else(|e| panic!("no line from child within {t:?}: {e}"))
    }

    /// Every remaining line, after the child exits (within `t`) with status 0.
    pub fn finish(&mut self, t: Duration) -> Vec<String> {
        let mut child = self.child.take().expect("running");
        drop(child.stdin.take());
        let st = wait_timeout(&mut child, t).expect("child did not finish in time");
        // The reader thread may still be draining the pipe: read until it hangs up.
        let mut lines = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Ok(l) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            lines.push(l);
        }
        assert!(st.success(), "child failed ({st:?}, signal {:?}); its lines: {lines:?}", st.signal());
        lines
    }

    /// Closes the child's stdin (roles that hold wait for it).
    pub fn release(&mut self) {
        if let Some(c) = self.child.as_mut() {
            drop(c.stdin.take());
        }
    }

    /// Waits (within `t`) for a child that is expected to die, and returns how it ended.
    pub fn wait_dead(&mut self, t: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        wait_timeout(&mut child, t).unwrap_or_else(|| panic!("child still running after {t:?}"))
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Polls `f` until it returns `Some`, for at most `t`.
pub fn eventually<T>(t: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + t;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---- The child side: what a test binary re-run in a role uses to talk to the harness above.

/// `k` parsed as a `T`, or `default` when unset. A value that does not parse panics rather
/// than falling back: a silent default once gave every soak producer the same id range.
pub fn env_or<T: std::str::FromStr>(k: &str, default: T) -> T {
    match std::env::var(k) {
        Ok(v) => {
            v.parse().unwrap_or_else(|_| panic!("{k}={v:?} does not parse as {}", std::any::type_name::<T>()))
        }
        Err(_) => default,
    }
}

/// Writes one `@@ ` line (what [`Role`] reads) and flushes it at once: the child may die next.
pub fn out(line: impl std::fmt::Display) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "@@ {line}");
    let _ = o.flush();
}

/// Blocks until the parent closes our stdin.
pub fn hold() {
    let mut s = String::new();
    while std::io::stdin().lock().read_line(&mut s).map(|n| n > 0).unwrap_or(false) {
        s.clear();
    }
}

/// The body of a test binary's `child_main`: a no-op when `XTCQ_TEST_ROLE` is unset (an
/// ordinary, empty test); else runs `run_role`, reports an error as `@@ error …`, and exits
/// without returning into the test harness (skipping destructors on purpose, for the roles
/// that simulate a crash).
pub fn child_entry<E: std::fmt::Display>(run_role: impl FnOnce(&str) -> Result<(), E>) {
    let Ok(role) = std::env::var("XTCQ_TEST_ROLE") else { return };
    let code = match run_role(&role) {
        Ok(()) => 0,
        Err(e) => {
            out(format_args!("error {e}"));
            1
        }
    };
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}
