//! Helpers shared by the newer CLI test files (the same harness as `cli.rs`: a real daemon,
//! real `xtcq` processes, every wait bounded, every daemon killed when its guard drops).
#![allow(dead_code)]

pub mod runs;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const XTCQ: &str = env!("CARGO_BIN_EXE_xtcq");

pub struct Daemon {
    pub child: Option<Child>,
    pub socket: PathBuf,
    pub segment: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn daemon_command() -> Command {
    let sibling = Path::new(XTCQ).with_file_name("xtcqd");
    if sibling.is_file() {
        Command::new(sibling)
    } else {
        let mut c = Command::new(XTCQ);
        c.arg("__xtcqd");
        c
    }
}

/// Small sizes, so tests are fast and a full queue is easy to reach.
pub const SIZES: &[&str] = &[
    "--queues",
    "4",
    "--deques-per-queue",
    "4",
    "--deque-capacity",
    "256",
    "--records",
    "4096",
    "--payload-bytes",
    "64",
    "--process-slots",
    "64",
    "--overflow-capacity",
    "4096",
];

impl Daemon {
    pub fn start() -> Daemon {
        Daemon::start_with(tempfile::tempdir().expect("tempdir"), SIZES)
    }

    /// Starts a daemon on `dir`'s socket and segment with the small sizes (adopting a segment
    /// already there).
    pub fn start_in(dir: tempfile::TempDir) -> Daemon {
        Daemon::start_with(dir, SIZES)
    }

    /// Starts a daemon on `dir`'s socket and segment with these flags.
    pub fn start_with(dir: tempfile::TempDir, flags: &[&str]) -> Daemon {
        Daemon::start_cmd(dir, flags, |_| {})
    }

    /// Starts a daemon as `start_with`, letting `tweak` adjust its command first.
    pub fn start_cmd(dir: tempfile::TempDir, flags: &[&str], tweak: impl FnOnce(&mut Command)) -> Daemon {
        let socket = dir.path().join("xtcqd.sock");
        let segment = dir.path().join("segment");
        let mut d = Daemon { child: None, socket, segment, dir };
        d.spawn(flags, tweak);
        d
    }

    /// (Re)starts the daemon process on this guard's socket and segment.
    pub fn spawn(&mut self, flags: &[&str], tweak: impl FnOnce(&mut Command)) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("xtcqd.log"))
            .expect("log");
        let _ = std::fs::remove_file(&self.socket);
        let mut cmd = daemon_command();
        cmd.arg("--socket")
            .arg(&self.socket)
            .arg("--segment")
            .arg(&self.segment)
            .args(flags)
            .env_remove("XTCQ_SOCKET")
            .env_remove("NOTIFY_SOCKET")
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        tweak(&mut cmd);
        self.child = Some(cmd.spawn().expect("start xtcqd"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            assert!(Instant::now() < deadline, "xtcqd not ready in 10 s: {}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `kill -9` of the daemon (the segment stays).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("xtcqd.log")).unwrap_or_default()
    }

    pub fn xtcq(&self) -> Command {
        let mut c = Command::new(XTCQ);
        c.arg("--socket").arg(&self.socket).env_remove("XTCQ_SOCKET");
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        run_bounded(self.xtcq().args(args), None)
    }

    /// `xtcq stats --json`.
    pub fn run_in(&self, args: &[&str], stdin: &[u8]) -> Output {
        run_bounded(self.xtcq().args(args), Some(stdin))
    }

    pub fn stats(&self) -> serde_json::Value {
        serde_json::from_str(&ok(&self.run(&["stats", "--json"]))).expect("json")
    }
}

/// Runs a command to completion within 60 s, feeding `stdin`.
pub fn run_bounded(cmd: &mut Command, stdin: Option<&[u8]>) -> Output {
    let mut child = cmd
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn xtcq");
    if let Some(input) = stdin {
        let mut w = child.stdin.take().expect("stdin");
        w.write_all(input).expect("write stdin");
    }
    wait_bounded(child, Duration::from_secs(60), &format!("xtcq {cmd:?}"))
}

/// Waits for `child` within `limit`, collecting its piped output; past the limit, kills it
/// and fails the test.
pub fn wait_bounded(child: Child, limit: Duration, what: &str) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{what} did not finish in {limit:?}");
        }
    }
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
pub fn ok(o: &Output) -> String {
    assert_eq!(code(o), 0, "expected success; stdout: {} stderr: {}", stdout(o), stderr(o));
    stdout(o)
}

/// Polls `f` every 10 ms until it holds, failing the test after `limit`.
#[track_caller]
pub fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A user and a group created for one test (as root), removed when dropped.
pub struct SystemUser {
    pub user: String,
    pub group: String,
}

impl SystemUser {
    /// `user` with primary group `group` (created too, unless it exists).
    pub fn create(user: &str, group: &str) -> SystemUser {
        let have_group =
            Command::new("getent").args(["group", group]).output().expect("getent").status.success();
        if !have_group {
            let s = Command::new("groupadd").arg(group).status().expect("groupadd");
            assert!(s.success(), "groupadd {group}");
        }
        let s = Command::new("useradd").args(["-M", "-N", "-g", group, "-s", "/bin/false", user]).status();
        assert!(s.expect("useradd").success(), "useradd {user}");
        SystemUser { user: user.into(), group: group.into() }
    }

    pub fn id(&self, flag: &str) -> u32 {
        let o = Command::new("id").args([flag, &self.user]).output().expect("id");
        String::from_utf8_lossy(&o.stdout).trim().parse().expect("id prints a number")
    }
}

impl Drop for SystemUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.user).status();
        let _ = Command::new("groupdel").arg(&self.group).status();
    }
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}
