//! A test binary re-run as a child process in a named role (`XTCQ_TEST_ROLE`), and the
//! `@@ ` lines it reports back.
//!
//! - The child runs one test of the binary, its module's `child_main`, selected with `--exact`
//!   and the name libtest gives it ([`test_name`]: one binary holds many modules, each may have
//!   its own `child_main`); [`child_entry`] makes that an empty test when no role is set.
//! - A role reports with [`out`], one flushed line at a time (it may be killed next), and
//!   ends with `std::process::exit`, skipping destructors on purpose for the roles that stand
//!   for a crash.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use crate::child::wait_timeout;

/// A child process running this test binary in a role.
pub struct Role {
    /// The child, until it is waited for or killed.
    pub child: Option<Child>,
    /// Its `@@ ` lines, without the marker.
    pub lines: Receiver<String>,
}

/// The name libtest gives the test `name` of the module whose `module_path!()` is `module`:
/// the path without the test binary's crate (`daemon::e2e` and `child_main` give
/// `e2e::child_main`; at a binary's root, `child_main`). What `--exact` selects when a test
/// binary re-runs itself as a child process.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_binary, inner)) => format!("{inner}::{name}"),
        None => name.to_string(),
    }
}

/// Spawns this test binary as role `role` of the `child_main` in module `module` (the
/// caller's `module_path!()`) against `socket`, with `env`.
pub fn spawn_role(module: &str, role: &str, socket: &Path, env: &[(&str, String)]) -> Role {
    spawn_role_with(module, role, socket, env, |_| {})
}

/// [`spawn_role`], letting `f` adjust the command first.
pub fn spawn_role_with(
    module: &str,
    role: &str,
    socket: &Path,
    env: &[(&str, String)],
    f: impl FnOnce(&mut Command),
) -> Role {
    let mut c = Command::new(std::env::current_exe().expect("test exe"));
    c.args(["--exact", &test_name(module, "child_main"), "--nocapture", "--test-threads", "1"])
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

    /// `kill -9` of the child, and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The child's pid (0 once it is gone).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        self.kill9();
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
