//! A real daemon on a temporary socket and segment, for one test.
//!
//! - [`Daemon`] kills its process when dropped; the temporary directory goes with the guard
//!   that owns it ([`Daemon::adopt_dir`] hands it to the guard of a restarted daemon).
//! - Nothing from the caller's environment chooses the daemon's paths or its systemd hand-off
//!   (`XTCQ_SOCKET`, `XTCQ_SEGMENT`, `NOTIFY_SOCKET`, `LISTEN_FDS` are removed).
//! - A start returns once the socket accepts; a daemon that exits first, or is not ready in
//!   20 s, fails the test with its log.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::child::{ok, run_bounded, wait_timeout};
use crate::sizes::SMALL_SEGMENT;

/// Numbers the log files of daemons started in one directory (restarts keep each log).
static LOGS: AtomicU32 = AtomicU32::new(0);

/// How long a daemon may take to accept its first connection.
const READY_LIMIT: Duration = Duration::from_secs(20);

/// A running daemon.
pub struct Daemon {
    /// The process, until it is killed or waited for (a test may take it to wait its own way).
    pub child: Option<Child>,
    dir: PathBuf,
    /// Control socket.
    pub socket: PathBuf,
    /// Segment file.
    pub segment: PathBuf,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
    exe: PathBuf,
    tmp: Option<tempfile::TempDir>,
}

/// A last adjustment of the daemon's command (a user to run as, stdin, ...).
type CommandTweak<'a> = Box<dyn FnOnce(&mut Command) + 'a>;

/// What [`Daemon::builder`] starts: flags, environment, directory, binary.
pub struct DaemonBuilder<'a> {
    flags: Vec<OsString>,
    sized: bool,
    env: Vec<(OsString, OsString)>,
    dir: Option<PathBuf>,
    tmp: Option<tempfile::TempDir>,
    exe: Option<PathBuf>,
    tweak: Option<CommandTweak<'a>>,
}

impl<'a> DaemonBuilder<'a> {
    /// Adds flags (sizes, scan intervals, ...). Without any size flag the segment is
    /// [`SMALL_SEGMENT`].
    pub fn flags<S: AsRef<std::ffi::OsStr>>(mut self, flags: impl IntoIterator<Item = S>) -> Self {
        for f in flags {
            let f = f.as_ref().to_owned();
            self.sized |= f == "--records" || f == "--queues" || f == "--process-slots";
            self.flags.push(f);
        }
        self
    }

    /// Leaves every size the caller did not give at the daemon's built-in default (65,536
    /// records of 448 bytes, ...) instead of [`SMALL_SEGMENT`].
    pub fn daemon_defaults(mut self) -> Self {
        self.sized = true;
        self
    }

    /// Sets one environment variable for the daemon.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets several environment variables for the daemon.
    pub fn envs<K: Into<OsString>, V: Into<OsString>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        for (k, v) in vars {
            self.env.push((k.into(), v.into()));
        }
        self
    }

    /// Keeps the daemon's files in this temporary directory (the guard owns it).
    pub fn in_dir(mut self, dir: tempfile::TempDir) -> Self {
        self.dir = Some(dir.path().to_path_buf());
        self.tmp = Some(dir);
        self
    }

    /// Keeps the daemon's files in `dir`, owned by someone else (a restart on the same paths).
    pub fn at(mut self, dir: &Path) -> Self {
        self.dir = Some(dir.to_path_buf());
        self
    }

    /// Runs this binary instead of the tests' daemon (the benches' copy, or one under study).
    pub fn exe(mut self, exe: impl Into<PathBuf>) -> Self {
        self.exe = Some(exe.into());
        self
    }

    /// Lets `f` adjust the command last (a user to run as, stdin, ...).
    pub fn command(mut self, f: impl FnOnce(&mut Command) + 'a) -> Self {
        self.tweak = Some(Box::new(f));
        self
    }

    /// Starts it and waits until its socket accepts.
    pub fn start(mut self) -> Daemon {
        if self.dir.is_none() {
            self = self.in_dir(tempfile::tempdir().expect("temporary directory"));
        }
        let dir = self.dir.take().expect("a directory");
        let exe = self.exe.take().unwrap_or_else(crate::exe::xtcqd_exe);
        let mut d = Daemon {
            child: None,
            socket: dir.join("xtcqd.sock"),
            segment: dir.join("segment"),
            log: dir.join(format!("xtcqd.{}.log", LOGS.fetch_add(1, Ordering::Relaxed))),
            dir,
            exe,
            tmp: self.tmp.take(),
        };
        let mut flags =
            if self.sized { Vec::new() } else { SMALL_SEGMENT.iter().map(OsString::from).collect() };
        flags.extend(self.flags);
        let env = self.env;
        let tweak = self.tweak;
        d.restart_with(&flags, move |c| {
            c.envs(env);
            if let Some(f) = tweak {
                f(c);
            }
        });
        d
    }
}

impl Daemon {
    /// A daemon on [`SMALL_SEGMENT`] in a fresh temporary directory.
    pub fn start() -> Daemon {
        Daemon::builder().start()
    }

    /// A daemon with these flags (size flags included, else [`SMALL_SEGMENT`]) in a fresh
    /// temporary directory.
    pub fn start_with(flags: &[&str]) -> Daemon {
        Daemon::builder().flags(flags).start()
    }

    /// A daemon to be set up further.
    pub fn builder<'a>() -> DaemonBuilder<'a> {
        DaemonBuilder {
            flags: Vec::new(),
            sized: false,
            env: Vec::new(),
            dir: None,
            tmp: None,
            exe: None,
            tweak: None,
        }
    }

    /// (Re)starts the daemon process on this guard's socket and segment with exactly these
    /// flags (sizes included), `tweak` adjusting the command; its output is appended to
    /// [`log`](Self::log). The previous process must be gone ([`kill`](Self::kill)).
    pub fn restart_with<S: AsRef<std::ffi::OsStr>>(&mut self, flags: &[S], tweak: impl FnOnce(&mut Command)) {
        assert!(self.child.is_none(), "restart_with: the daemon is still running; kill it first");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("log file");
        let mut cmd = Command::new(&self.exe);
        cmd.arg("--socket")
            .arg(&self.socket)
            .arg("--segment")
            .arg(&self.segment)
            .args(flags)
            .env("RUST_LOG", "info")
            .env_remove("XTCQ_SOCKET")
            .env_remove("XTCQ_SEGMENT")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("LISTEN_FDS")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log);
        tweak(&mut cmd);
        self.child = Some(cmd.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", self.exe.display())));
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_LIMIT;
        loop {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                panic!("xtcqd exited early ({st}); log:\n{}", self.log_text());
            }
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "xtcqd not ready in {READY_LIMIT:?}; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The directory holding socket, segment and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes ownership of the temporary directory from another guard (for restarts).
    pub fn adopt_dir(&mut self, other: &mut Daemon) {
        self.tmp = other.tmp.take();
    }

    /// What the daemon wrote so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its pid (0 once it is gone).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Sends `sig` to it.
    pub fn signal(&self, sig: libc::c_int) {
        let pid = self.pid();
        assert!(pid != 0, "the daemon is not running");
        // SAFETY: kill(2) on our own child's pid, not yet reaped.
        unsafe { libc::kill(pid as libc::pid_t, sig) };
    }

    /// Sends SIGTERM and waits (10 s) for the exit.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit(Duration::from_secs(10))
    }

    /// Waits up to `t` for it to exit on its own.
    pub fn wait_exit(&mut self, t: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("daemon running");
        wait_timeout(&mut child, t).unwrap_or_else(|| panic!("xtcqd did not exit; log:\n{}", self.log_text()))
    }

    /// `kill -9` of the daemon (the segment stays), and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A client connected to it.
    pub fn client(&self) -> xtcq_client::Client {
        xtcq_client::Client::connect(Some(&self.socket)).expect("connect to the daemon")
    }

    /// An `xtcq` command aimed at this daemon.
    pub fn xtcq(&self) -> Command {
        let mut c = crate::exe::xtcq();
        c.arg("--socket").arg(&self.socket);
        c
    }

    /// Runs `xtcq ARGS` against it, stdin /dev/null.
    pub fn run(&self, args: &[&str]) -> Output {
        run_bounded(self.xtcq().args(args), None)
    }

    /// Runs `xtcq ARGS` against it, feeding `stdin`.
    pub fn run_in(&self, args: &[&str], stdin: &[u8]) -> Output {
        run_bounded(self.xtcq().args(args), Some(stdin))
    }

    /// Waits (at most 20 s) until process `pid` is registered with the daemon (it attached).
    #[track_caller]
    pub fn wait_attached(&self, pid: u32) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.stats();
            if s["processes"].as_array().is_some_and(|ps| ps.iter().any(|p| p["pid"] == pid)) {
                return;
            }
            assert!(Instant::now() < deadline, "pid {pid} never attached: {s}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Steals and acks every queued job of `queue`; their payloads as text, sorted.
    pub fn drain(&self, queue: &str) -> Vec<String> {
        let c = self.client();
        let t = c.attach_thief(queue).expect("attach a thief");
        let mut got = Vec::new();
        while let Some(j) = t.steal().expect("steal") {
            got.push(String::from_utf8(j.payload().expect("payload")).expect("a UTF-8 payload"));
            j.ack().expect("ack");
        }
        got.sort();
        got
    }

    /// `xtcq stats --json`.
    pub fn stats(&self) -> serde_json::Value {
        serde_json::from_str(&ok(&self.run(&["stats", "--json"]))).expect("stats --json prints JSON")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts the daemon binary on these paths without waiting or a guard (for tests that watch
/// it refuse, or race it); its output goes to `log`.
pub fn spawn_daemon(
    socket: &Path,
    segment: &Path,
    log: &Path,
    flags: &[&str],
    env: &[(&str, &str)],
) -> Child {
    let logf = std::fs::File::create(log).expect("log file");
    crate::exe::xtcqd()
        .envs(env.iter().copied())
        .arg("--socket")
        .arg(socket)
        .arg("--segment")
        .arg(segment)
        .args(flags)
        .env("RUST_LOG", "info")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("LISTEN_FDS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(logf)
        .spawn()
        .expect("spawn xtcqd")
}

/// Runs the daemon to its end (a start-up refusal) within 10 s; returns status and stderr.
pub fn run_daemon_once(socket: &Path, segment: &Path, flags: &[&str]) -> (ExitStatus, String) {
    let out = crate::child::run_within(
        crate::exe::xtcqd().arg("--socket").arg(socket).arg("--segment").arg(segment).args(flags),
        Duration::from_secs(10),
    );
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
}
