//! The bridge's tests: a real `nats-server` with JetStream on loopback (in a temporary
//! directory; the test is skipped, loudly, when the server is not installed, unless
//! `XTCQ_REQUIRE_NATS=1`), real daemons ("hosts", each its own socket and segment), real
//! `xtcq` and `xtcq-bridge` processes.
//!
//! - Every process is a guard killed when dropped; every wait is bounded.
//! - A host is a [`Daemon`] on [`HOST_SEGMENT`]; nothing here starts a daemon its own way.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;

use crate::child::{wait_timeout, wait_until};
use crate::daemon::Daemon;
use crate::sizes::HOST_SEGMENT;

fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new().create(true).append(true).open(path).expect("log file")
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A `nats-server -js` on loopback, its store in a temporary directory.
pub struct Nats {
    child: Option<Child>,
    pub port: u16,
    pub dir: tempfile::TempDir,
    /// A configuration file (`-c`), instead of the plain command line.
    config: Option<PathBuf>,
    /// The user and password the helpers below connect with, on a server that wants them.
    admin: Option<(String, String)>,
    /// Variables set for the server (its configuration may name them).
    env: Vec<(String, String)>,
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Nats {
    /// `None` (after saying so on stderr) when `nats-server` is not installed and
    /// `XTCQ_REQUIRE_NATS` is not set.
    pub fn start(test: &str) -> Option<Nats> {
        if Command::new("nats-server").arg("--version").output().is_err() {
            assert!(
                std::env::var_os("XTCQ_REQUIRE_NATS").is_none(),
                "XTCQ_REQUIRE_NATS is set but nats-server is not installed (apt-get install nats-server)"
            );
            // The record names the test (its thread's name) already.
            let _ = test;
            crate::skipped("nats-server not installed (apt-get install nats-server)");
            return None;
        }
        let mut n = Nats {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().expect("tempdir"),
            config: None,
            admin: None,
            env: Vec::new(),
        };
        n.spawn();
        Some(n)
    }

    /// As [`Nats::start`], from the configuration `config(port, store dir)` returns (its
    /// `listen` and `jetstream.store_dir` must be those), the server run with `env`; the
    /// helpers connect as `admin`.
    pub fn start_with_config(
        test: &str,
        admin: (&str, &str),
        env: &[(&str, &str)],
        config: impl FnOnce(u16, &Path) -> String,
    ) -> Option<Nats> {
        let mut n = Nats::start(test)?;
        n.kill();
        n.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let path = n.dir.path().join("nats.conf");
        std::fs::write(&path, config(n.port, &n.dir.path().join("store"))).expect("write nats.conf");
        n.config = Some(path);
        n.admin = Some((admin.0.to_string(), admin.1.to_string()));
        n.spawn();
        Some(n)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// (Re)starts the server on the same store.
    pub fn spawn(&mut self) {
        let log = log_file(&self.dir.path().join("nats.log"));
        let store = self.dir.path().join("store");
        let mut cmd = Command::new("nats-server");
        match &self.config {
            Some(conf) => cmd.arg("-c").arg(conf),
            None => {
                cmd.args(["-js", "-sd"]).arg(&store).args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            }
        };
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        let child = cmd.stdout(log.try_clone().expect("log")).stderr(log).spawn().expect("start nats-server");
        self.child = Some(child);
        let log = self.dir.path().join("nats.log");
        wait_until(Duration::from_secs(10), "nats-server ready", || {
            std::fs::read_to_string(&log).unwrap_or_default().matches("Server is ready").count() > 0
                && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
        });
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn js<T>(&self, f: impl AsyncFnOnce(jetstream::Context) -> T) -> T {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let c = self.connect().await;
            f(jetstream::new(c)).await
        })
    }

    /// A client of this server (as its admin user, where it has one).
    pub async fn connect(&self) -> async_nats::Client {
        let mut o = async_nats::ConnectOptions::new();
        if let Some((user, password)) = &self.admin {
            o = o.user_and_password(user.clone(), password.clone());
        }
        o.connect(self.url()).await.expect("connect to nats-server")
    }

    /// Deletes `stream` (and so its consumers), as an operator would.
    pub fn delete_stream(&self, stream: &str) {
        self.js(async |js| {
            js.delete_stream(stream).await.expect("delete stream");
        })
    }

    /// Creates a work-queue stream `name` on `subject` with a duplicate window, as an
    /// operator would (the settings the bridge wants).
    pub fn create_work_stream(&self, name: &str, subject: &str) {
        self.js(async |js| {
            let cfg = jetstream::stream::Config {
                name: name.to_string(),
                subjects: vec![subject.to_string()],
                retention: jetstream::stream::RetentionPolicy::WorkQueue,
                storage: jetstream::stream::StorageType::File,
                duplicate_window: Duration::from_secs(600),
                ..Default::default()
            };
            js.create_stream(cfg).await.expect("create stream");
        })
    }

    /// The `Nats-Msg-Id` of each message stored in `stream`, by sequence (nothing consumed).
    pub fn msg_ids(&self, stream: &str) -> Vec<String> {
        self.js(async |js| {
            let mut s = js.get_stream(stream).await.expect("stream");
            let state = s.info().await.expect("stream info").state.clone();
            let mut out = Vec::new();
            for seq in state.first_sequence..=state.last_sequence {
                if let Ok(m) = s.get_raw_message(seq).await {
                    let id =
                        m.headers.get(async_nats::header::NATS_MESSAGE_ID).map(|v| v.as_str().to_string());
                    out.push(id.unwrap_or_default());
                }
            }
            out
        })
    }

    /// Publishes `(msg id, payload)` pairs on `subject` as any client allowed to publish
    /// there; how many the stream stored (the rest it took for duplicates).
    pub fn publish_with_ids(&self, subject: &str, msgs: &[(String, Vec<u8>)]) -> usize {
        self.js(async |js| {
            let mut stored = 0;
            for (id, payload) in msgs {
                let mut h = async_nats::HeaderMap::new();
                h.insert("Nats-Msg-Id", id.as_str());
                let ack = js.publish_with_headers(subject.to_string(), h, payload.clone().into()).await;
                let ack = ack.expect("publish").await.expect("publish ack");
                stored += usize::from(!ack.duplicate);
            }
            stored
        })
    }

    /// Messages stored in `stream` now.
    pub fn messages(&self, stream: &str) -> u64 {
        self.js(async |js| {
            let mut s = js.get_stream(stream).await.expect("stream");
            s.info().await.expect("stream info").state.messages
        })
    }

    /// `(num_pending, num_ack_pending, num_redelivered)` of consumer `name`.
    pub fn consumer(&self, stream: &str, name: &str) -> (u64, usize, usize) {
        self.js(async |js| {
            let s = js.get_stream(stream).await.expect("stream");
            let mut c: jetstream::consumer::PullConsumer = s.get_consumer(name).await.expect("consumer");
            let i = c.info().await.expect("consumer info");
            (i.num_pending, i.num_ack_pending, i.num_redelivered)
        })
    }

    /// The payloads and headers of every message of `stream` (a limits stream: read by
    /// sequence, nothing consumed).
    pub fn read_all(&self, stream: &str) -> Vec<(Vec<u8>, String)> {
        self.js(async |js| {
            let mut s = js.get_stream(stream).await.expect("stream");
            let state = s.info().await.expect("stream info").state.clone();
            let mut out = Vec::new();
            for seq in state.first_sequence..=state.last_sequence {
                if let Ok(m) = s.get_raw_message(seq).await {
                    out.push((m.payload.to_vec(), format!("{:?}", m.headers)));
                }
            }
            out
        })
    }
}

/// One "host": a daemon with its own socket and segment.
pub struct Host {
    /// Its daemon.
    pub daemon: Daemon,
    /// The name the failures print.
    pub name: &'static str,
}

impl Host {
    /// Starts a host's daemon on [`HOST_SEGMENT`].
    pub fn start(name: &'static str) -> Host {
        Host { daemon: Daemon::start_with(HOST_SEGMENT), name }
    }

    /// `kill -9` of the daemon, then a new one on the same socket and segment.
    pub fn restart_after_kill9(&mut self) {
        self.daemon.kill();
        self.daemon.restart_with(HOST_SEGMENT, |_| {});
    }

    /// Its control socket.
    pub fn socket(&self) -> PathBuf {
        self.daemon.socket.clone()
    }

    /// The file of `xtcq-bridge out`'s message id secret on this host.
    pub fn id_secret(&self) -> PathBuf {
        self.dir().join("bridge-id.secret")
    }

    /// Its directory (socket, segment, logs).
    pub fn dir(&self) -> &Path {
        self.daemon.dir()
    }

    /// An `xtcq` command aimed at this host.
    pub fn xtcq(&self) -> Command {
        self.daemon.xtcq()
    }

    /// Runs `xtcq ARGS` with `stdin`, bounded.
    #[track_caller]
    pub fn run(&self, args: &[&str], stdin: &[u8]) -> Output {
        self.daemon.run_in(args, stdin)
    }

    /// `xtcq ARGS`, which must succeed; its stdout.
    #[track_caller]
    pub fn ok(&self, args: &[&str], stdin: &[u8]) -> String {
        let o = self.run(args, stdin);
        assert!(
            o.status.success(),
            "xtcq {args:?} on host {}: {}{}",
            self.name,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Jobs of `queue` not settled yet (being pushed, queued or running).
    pub fn live(&self, queue: &str) -> u64 {
        let c = xtcq_client::Client::connect(Some(&self.socket())).expect("connect");
        let s = c.stats(Some(queue)).expect("stats");
        let q = s.queues.iter().find(|q| q.info.name == queue).expect("queue in stats");
        q.records.filling + q.records.queued + q.records.claimed
    }

    /// The dead letters of `queue`.
    pub fn dead(&self, queue: &str) -> Vec<xtcq_client::DeadLetter> {
        let c = xtcq_client::Client::connect(Some(&self.socket())).expect("connect");
        c.dead_letters(queue).expect("dead letters")
    }

    /// `xtcq check`: the segment is consistent.
    #[track_caller]
    pub fn check(&self) {
        self.ok(&["check"], b"");
    }

    /// A worker running `script` (sh -c) for each job of `queue`, until `--idle-exit`.
    pub fn worker(&self, queue: &str, idle_exit: &str, script: &str) -> Proc {
        let log = self.dir().join(format!("work-{}.log", free_port()));
        let mut c = self.xtcq();
        c.args(["work", queue, "--idle-exit", idle_exit, "--", "sh", "-c", script]);
        Proc::spawn(c, log)
    }
}

/// A child process with its output in a log file, killed on drop.
pub struct Proc {
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

impl Proc {
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Proc {
        let f = log_file(&log);
        let child =
            cmd.stdin(Stdio::null()).stdout(f.try_clone().expect("log")).stderr(f).spawn().expect("spawn");
        Proc { child: Some(child), log }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid, not yet reaped.
        unsafe { libc::kill(self.pid(), sig) };
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits (bounded) for it to exit; its exit status.
    #[track_caller]
    pub fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        wait_timeout(&mut c, limit)
            .unwrap_or_else(|| panic!("process did not exit in {limit:?}: {}", self.log_text()))
    }
}

/// An `xtcq-bridge` process with a stats file.
pub struct Bridge {
    pub proc: Proc,
    pub stats: PathBuf,
}

impl Bridge {
    /// `xtcq-bridge DIRECTION QUEUE --socket .. --nats .. --stream S EXTRA..`, with `env`;
    /// `out` gets `--id-secret` in the host's directory (one secret per host, kept across
    /// restarts) unless `extra` names one.
    pub fn start(
        host: &Host,
        nats: &Nats,
        direction: &str,
        queue: &str,
        stream: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Bridge {
        let tag = free_port();
        let stats = host.dir().join(format!("bridge-{direction}-{tag}.json"));
        let log = host.dir().join(format!("bridge-{direction}-{tag}.log"));
        let mut c = Command::new(crate::exe::bridge_exe());
        c.args([direction, queue, "--nats", &nats.url(), "--stream", stream])
            .arg("--socket")
            .arg(host.socket())
            .arg("--stats-file")
            .arg(&stats)
            .args(extra)
            .env_remove("XTCQ_SOCKET")
            .env_remove("XTCQ_BRIDGE_ID_SECRET")
            .env("RUST_LOG", "info");
        if direction == "out" && !extra.contains(&"--id-secret") {
            c.arg("--id-secret").arg(host.id_secret());
        }
        for (k, v) in env {
            c.env(k, v);
        }
        let b = Bridge { proc: Proc::spawn(c, log), stats };
        wait_until(Duration::from_secs(20), "bridge running", || {
            b.proc.log_text().contains("running") || b.proc.log_text().contains("xtcq-bridge:")
        });
        assert!(!b.proc.log_text().contains("xtcq-bridge:"), "bridge failed to start: {}", b.proc.log_text());
        b
    }

    /// Counter `key` from the stats file (0 before the first write).
    pub fn stat(&self, key: &str) -> u64 {
        let text = std::fs::read_to_string(&self.stats).unwrap_or_default();
        let pat = format!("\"{key}\":");
        text.find(&pat)
            .map(|i| &text[i + pat.len()..])
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// `wait_until`, with this bridge's log in the failure.
    #[track_caller]
    pub fn wait_for(&self, limit: Duration, what: &str, mut f: impl FnMut(&Bridge) -> bool) {
        let deadline = Instant::now() + limit;
        while !f(self) {
            assert!(
                Instant::now() < deadline,
                "{what}: not within {limit:?}; the bridge's log:\n{}",
                self.proc.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then a bounded wait for a clean exit.
    #[track_caller]
    pub fn stop(&mut self) {
        self.proc.signal(libc::SIGTERM);
        let s = self.proc.wait(Duration::from_secs(30));
        assert!(s.success(), "bridge exited with {s} after SIGTERM: {}", self.proc.log_text());
    }
}

/// `n` distinct payloads `job-0..`, one a line.
pub fn payloads(n: usize) -> (Vec<String>, Vec<u8>) {
    let v: Vec<String> = (0..n).map(|i| format!("job-{i}")).collect();
    let mut text = v.join("\n").into_bytes();
    text.push(b'\n');
    (v, text)
}

/// Each line of `file` counted.
pub fn line_counts(file: &Path) -> std::collections::HashMap<String, usize> {
    let mut m = std::collections::HashMap::new();
    for l in std::fs::read_to_string(file).unwrap_or_default().lines() {
        *m.entry(l.to_string()).or_insert(0) += 1;
    }
    m
}

/// What `Nats::fetch_and_drop` keeps alive: its connection (a closed one could make the
/// server take back its last delivery).
pub struct Holder {
    _client: async_nats::Client,
    _rt: tokio::runtime::Runtime,
}

impl Nats {
    /// Plays holders that never ack: fetches one message of consumer `name` (created with
    /// `ack_wait` if missing) until it has seen delivery `times`, each fetch waiting longer
    /// than AckWait so that no redelivery goes to an expired request. Returns the last
    /// delivery count seen, and the connection, to keep open.
    pub fn fetch_and_drop(&self, stream: &str, name: &str, ack_wait: Duration, times: i64) -> (i64, Holder) {
        use futures_util::StreamExt;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let (delivered, client) = rt.block_on(async {
            let client = self.connect().await;
            let js = jetstream::new(client.clone());
            let s = js.get_stream(stream).await.expect("stream");
            let cfg = jetstream::consumer::pull::Config {
                durable_name: Some(name.to_string()),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait,
                max_deliver: -1,
                ..Default::default()
            };
            let c = s.get_or_create_consumer(name, cfg).await.expect("consumer");
            let mut delivered = 0;
            let deadline = Instant::now() + Duration::from_secs(30);
            while delivered < times {
                assert!(Instant::now() < deadline, "no redelivery within 30 s");
                let mut batch =
                    c.batch().max_messages(1).expires(ack_wait * 5).messages().await.expect("fetch");
                if let Some(m) = batch.next().await {
                    delivered = m.expect("message").info().expect("info").delivered;
                }
            }
            (delivered, client)
        });
        (delivered, Holder { _client: client, _rt: rt })
    }
}

impl Nats {
    /// Creates a limits-retention stream `name` on `subject` (not a work queue).
    pub fn create_limits_stream(&self, name: &str, subject: &str) {
        self.js(async |js| {
            let cfg = jetstream::stream::Config {
                name: name.to_string(),
                subjects: vec![subject.to_string()],
                ..Default::default()
            };
            js.create_stream(cfg).await.expect("create stream");
        })
    }
}
