//! The control-channel server: a tokio Unix-socket listener, one task per connection, one
//! watcher per attached process, and a clean stop on SIGTERM / SIGINT / a Shutdown request.
//!
//! A connection's life:
//!
//! ```text
//!  accept -> SO_PEERCRED + pidfd -> Hello (within --io-timeout) -> version check
//!         -> uid/gid check -> HelloOk -> [Resume] -> requests ... -> EOF
//!         -> if it attached (or resumed) and still keeps the slot: wait for its process
//!            to exit (pidfd readable)
//!         -> recover_process: give back records and leases, free the slot
//! ```
//!
//! A process that lives on after its connection ended (a daemon restart, a lost link)
//! keeps its slot; when it connects again it sends `Resume` first and gets that slot back
//! for the new connection, which then keeps it (see `registry`'s keepers): the watcher of an
//! adopted slot, or the old connection, stands down, and the new connection's end plus the
//! process's exit recover it, once.
//!
//! Invariants:
//! - a malformed, oversized or hostile frame costs only its own connection: it gets an error
//!   reply (when the stream is still in sync) or is closed; nothing a peer sends can panic
//!   or stall the daemon (a frame once started must complete within `--io-timeout`; a reply
//!   must be written within it);
//! - a slot's leases are released only after its connection is closed *and* its process has
//!   exited (or by the holder's explicit Detach) — never on a mere disconnect;
//! - on shutdown, attached processes keep their slots and leases in the segment; the next
//!   daemon adopts them and watches them again.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};
use xtcq_proto::frame::{self, FrameError};
use xtcq_proto::names;
use xtcq_proto::{self as proto, ErrorCode, ErrorReply, Request, Response, ServerMessage};

use crate::config::Config;
use crate::limits::{UidConnection, UidConnections};
use crate::peer::{self, Peer};
use crate::registry::{Access, Keeper, ProcessId, Registry, SlotId};
use crate::startup::{self, Prepared};
use crate::DaemonError;

pub mod framing;
mod requests;

use framing::FrameReader;

/// State shared by every task.
struct Shared {
    cfg: Config,
    reg: Registry,
    hello: proto::HelloOk,
    shutdown: watch::Sender<Option<String>>,
    connections: AtomicU64,
    per_uid: Arc<UidConnections>,
    my_uid: u32,
    /// The segment file's watch: once it is lost, control requests are refused.
    guard: crate::guard::SegmentGuard,
}

impl Shared {
    fn stop(&self, reason: String) {
        self.shutdown.send_if_modified(|v| {
            if v.is_none() {
                *v = Some(reason);
                true
            } else {
                false
            }
        });
    }
}

/// Resolves when shutdown is asked for; yields the reason.
async fn shutdown_requested(rx: &mut watch::Receiver<Option<String>>) -> String {
    loop {
        if let Some(r) = rx.borrow_and_update().clone() {
            return r;
        }
        if rx.changed().await.is_err() {
            return "daemon stopping".into();
        }
    }
}

/// Serves until shutdown; then removes the socket and detaches from the segment.
pub async fn serve(cfg: Config, prep: Prepared) -> Result<(), DaemonError> {
    // Before adopting: every live attached process needs a pidfd, and running out would have
    // made live processes look dead.
    let fds = peer::raise_fd_limit();
    let seg = prep.segment.clone();
    let max_connections = connections_for(&cfg, fds, seg.config().process_slots);
    let st = shared_state(&cfg, &seg, prep.state, fds, max_connections)?;
    let mut tasks = JoinSet::new();
    if prep.created {
        st.reg.reset_state();
    } else {
        watch_adopted(&st, &mut tasks);
    }
    spawn_background(&st, &mut tasks);
    spawn_metrics(&st, &mut tasks).await?;

    let listener = UnixListener::from_std(prep.listener).map_err(|e| DaemonError::Io {
        what: "cannot register the socket".into(),
        path: cfg.socket.clone(),
        source: e,
    })?;
    // Installed here, before READY=1, so that no SIGTERM arrives before we handle it.
    install_stop_signals(&st)?;
    // A signal that came between binding the socket and installing the handlers above.
    if let Some(reason) = crate::early_signal() {
        info!("{reason} (before the daemon was ready): shutting down");
        st.stop(reason.to_string());
    }
    if let Some(path) = &cfg.import_on_start {
        let reg = st.reg.clone();
        let path = path.clone();
        tokio::task::spawn_blocking(move || crate::dump_import::import_on_start(&reg, &path))
            .await
            .map_err(|e| DaemonError::Dump(crate::dump::DumpError::Import(e.to_string())))??;
    }
    announce_ready(&cfg, &seg);

    let reason = accept_until_stopped(&st, &listener, max_connections, &mut tasks).await;

    let _ = crate::notify::sd_notify("STOPPING=1");
    drop(listener);
    startup::remove_socket(&cfg.socket, prep.socket_id);
    drain(&mut tasks).await;
    let live = seg.header_live();
    let _ = live.daemon_pid.compare_exchange(std::process::id(), 0, Ordering::AcqRel, Ordering::Relaxed);
    if let Some(path) = &cfg.export_on_stop {
        let (queues, jobs, skipped) = crate::dump::export(&seg, path)?;
        info!(file = %path.display(), queues, jobs, skipped, "exported the queues and jobs");
    }
    info!(%reason, "xtcqd stopped");
    Ok(())
}

/// The state every task shares: the registry over `seg` (with its per-uid and fence
/// limits, from what the `fds` descriptors allow), the Hello reply, the stop signal.
fn shared_state(
    cfg: &Config,
    seg: &Arc<xtcq_shm::Segment>,
    state: crate::state::StateFile,
    fds: u64,
    max_connections: usize,
) -> Result<Arc<Shared>, DaemonError> {
    let live = seg.header_live();
    let hello = proto::HelloOk {
        protocol_version: proto::PROTOCOL_VERSION,
        daemon_version: env!("CARGO_PKG_VERSION").to_string(),
        daemon_pid: std::process::id(),
        daemon_epoch: live.daemon_epoch.load(Ordering::Relaxed),
        segment_path: seg.path().to_path_buf(),
    };
    let slots_per_uid = cfg.process_slots_per_uid.unwrap_or((seg.config().process_slots / 2).max(1));
    // What the descriptors leave after the reserve, one pidfd per slot and two per
    // connection: one pidfd per fenced command.
    let fences = fds.saturating_sub(64 + u64::from(seg.config().process_slots) + 2 * max_connections as u64);
    let reg = Registry::with_state(seg.clone(), state)
        .limit_slots_per_uid(slots_per_uid, Config::unlimited_uids())
        .limit_fences(usize::try_from(fences).unwrap_or(usize::MAX));
    let (tx, _) = watch::channel(None);
    Ok(Arc::new(Shared {
        cfg: cfg.clone(),
        reg,
        hello,
        shutdown: tx,
        connections: AtomicU64::new(0),
        per_uid: UidConnections::new(cfg.max_connections_per_uid, Config::unlimited_uids()),
        my_uid: rustix::process::getuid().as_raw(),
        guard: crate::guard::SegmentGuard::new(seg.clone()).map_err(|e| DaemonError::Io {
            what: "cannot fstat the segment".into(),
            path: seg.path().to_path_buf(),
            source: e,
        })?,
    }))
}

/// The daemon's own tasks: the lease and stray scan (which runs even with lease expiry
/// off, to index strays), the segment file's watch, the delayed-job timers.
fn spawn_background(st: &Arc<Shared>, tasks: &mut JoinSet<()>) {
    let every = st.cfg.lease_scan_interval.unwrap_or(Duration::from_millis(100));
    tasks.spawn(scan(st.clone(), every, st.cfg.lease_scan_interval.is_some()));
    tasks.spawn(watch_segment(st.clone()));
    tasks.spawn(crate::delayed::run(st.reg.clone(), st.shutdown.subscribe()));
}

/// The `/metrics` listener, when `--metrics` asks for one; binding it is part of starting up
/// (a taken port is an error before READY=1, not a silent gap in the metrics).
async fn spawn_metrics(st: &Arc<Shared>, tasks: &mut JoinSet<()>) -> Result<(), DaemonError> {
    if let Some(addr) = st.cfg.metrics {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| DaemonError::Io {
            what: "cannot listen for --metrics on".into(),
            path: addr.to_string().into(),
            source: e,
        })?;
        tasks.spawn(crate::metrics_http::run(st.reg.clone(), listener, st.shutdown.subscribe()));
    }
    Ok(())
}

/// Lets the connection tasks see the shutdown, tell their clients and close (3 s at most).
async fn drain(tasks: &mut JoinSet<()>) {
    let drained =
        tokio::time::timeout(Duration::from_secs(3), async { while tasks.join_next().await.is_some() {} })
            .await;
    if drained.is_err() {
        warn!("some connections did not close in time; dropping them");
        tasks.abort_all();
    }
}

/// Watches each live process adopted from the previous daemon until it exits (or resumes
/// its slot over a connection).
fn watch_adopted(st: &Arc<Shared>, tasks: &mut JoinSet<()>) {
    let reg = &st.reg;
    let adopted = reg.adopt(peer::is_alive);
    for a in adopted {
        match peer::pidfd_for_process(a.process.pid, a.process.start_time) {
            Ok(Some(fd)) => {
                info!(
                    slot = a.slot.slot,
                    pid = a.process.pid,
                    "adopted a live attached process; watching it"
                );
                let st = st.clone();
                tasks.spawn(async move { watch_exit(st, a.slot, a.keeper, Some(fd), a.process).await });
            }
            Ok(None) => reg.recover_process(a.slot),
            // Unknown is not dead: keep its claims and watch it through /proc and
            // kill(pid, 0) until it exits.
            Err(e) => {
                warn!(
                    slot = a.slot.slot,
                    pid = a.process.pid,
                    error = %e,
                    "cannot open a pidfd for an adopted process; keeping it and polling its liveness"
                );
                let st = st.clone();
                tasks.spawn(async move { watch_exit(st, a.slot, a.keeper, None, a.process).await });
            }
        }
    }
}

/// SIGTERM and SIGINT stop the daemon cleanly.
fn install_stop_signals(st: &Arc<Shared>) -> Result<(), DaemonError> {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        return Err(DaemonError::Runtime(io::Error::other("cannot install the SIGTERM / SIGINT handlers")));
    };
    let st = st.clone();
    tokio::spawn(async move {
        let reason = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        info!("{reason}: shutting down");
        st.stop(reason.to_string());
    });
    Ok(())
}

/// Tells systemd (when it started us) and the log that the daemon serves.
fn announce_ready(cfg: &Config, seg: &xtcq_shm::Segment) {
    match crate::notify::sd_notify(&format!("READY=1\nMAINPID={}", std::process::id())) {
        Ok(true) => debug!("notified systemd: READY=1"),
        Ok(false) => {}
        Err(e) => warn!(error = %e, "cannot notify systemd"),
    }
    info!(
        socket = %cfg.socket.display(),
        segment = %seg.path().display(),
        pid = std::process::id(),
        allow_users = %names::uid_list_label(&cfg.allow_uids),
        allow_groups = %names::gid_list_label(&cfg.allow_gids),
        "xtcqd ready"
    );
}

/// Accepts connections, each in a task of `tasks`, until a shutdown is asked for; returns
/// its reason.
async fn accept_until_stopped(
    st: &Arc<Shared>,
    listener: &UnixListener,
    max_connections: usize,
    tasks: &mut JoinSet<()>,
) -> String {
    let permits = Arc::new(Semaphore::new(max_connections));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
    let mut stop_rx = st.shutdown.subscribe();
    loop {
        tokio::select! {
            r = shutdown_requested(&mut stop_rx) => return r,
            a = listener.accept() => match a {
                Ok((stream, _)) => accept_one(st, stream, &permits, &refusals, tasks),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
        while tasks.try_join_next().is_some() {}
    }
}

/// Serves `stream` in a task, or refuses it (its user's share, or every place, is taken).
fn accept_one(
    st: &Arc<Shared>,
    stream: UnixStream,
    permits: &Arc<Semaphore>,
    refusals: &Arc<Semaphore>,
    tasks: &mut JoinSet<()>,
) {
    let cfg = &st.cfg;
    // The per-user limit first, by the kernel's uid for the peer: one user's
    // connections beyond its share must not take the places under
    // --max-connections that others need.
    let uid = rustix::net::sockopt::socket_peercred(&stream).ok().map(|c| c.uid.as_raw());
    let uid_conn = match uid.map(|u| st.per_uid.enter(u)) {
        Some(Err(reply)) => {
            refuse_bounded(refusals, stream, reply, cfg.io_timeout);
            return;
        }
        Some(Ok(g)) => Some(g),
        None => None,
    };
    match permits.clone().try_acquire_owned() {
        Ok(permit) => {
            let st = st.clone();
            tasks.spawn(async move {
                st.connections.fetch_add(1, Ordering::Relaxed);
                connection(st.clone(), stream, permit, uid_conn).await;
            });
        }
        Err(_) => {
            let n = cfg.max_connections;
            let reply = ErrorReply::new(
                ErrorCode::LimitReached,
                format!(
                    "xtcqd has {n} connections, its limit (--max-connections {n}); try again \
                         later, or restart xtcqd with a higher --max-connections"
                ),
            );
            refuse_bounded(refusals, stream, reply, cfg.io_timeout);
        }
    }
}

/// Refusals being answered at once; beyond them a refused connection is closed unanswered
/// (a flood of connections must not hold the daemon's descriptors).
const MAX_REFUSALS: usize = 64;

/// The longest a refusal waits for the client's Hello before answering.
const REFUSAL_WAIT: Duration = Duration::from_secs(1);

/// Answers `stream` with `reply` in a task of its own if fewer than `MAX_REFUSALS` are being
/// answered, else closes it.
fn refuse_bounded(refusals: &Arc<Semaphore>, stream: UnixStream, reply: ErrorReply, t: Duration) {
    let Ok(place) = refusals.clone().try_acquire_owned() else {
        debug!("too many refusals in flight; closing a refused connection unanswered");
        return;
    };
    tokio::spawn(async move {
        refuse_early(stream, reply, t.min(REFUSAL_WAIT)).await;
        drop(place);
    });
}

/// Answers a connection's Hello with a refusal, without looking at it. The Hello is read
/// first (within `t`): closing a Unix socket with unread data resets it, and the client
/// would see a reset instead of the reason.
async fn refuse_early(mut stream: UnixStream, reply: ErrorReply, t: Duration) {
    let _ = tokio::time::timeout(t, FrameReader::default().next(&mut stream, t)).await;
    let reply = proto::HelloReply::Refused(reply);
    if let Ok(bytes) = framing::encode(&reply) {
        let _ = tokio::time::timeout(t, stream.write_all(&bytes)).await;
    }
}

/// Sleeps for `d`, or forever.
async fn sleep_or_never(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// How a connection ended.
enum ConnectionEnd {
    /// The peer closed it (or broke it).
    Closed,
    /// The daemon is stopping.
    Shutdown,
}

struct Conn {
    st: Arc<Shared>,
    stream: UnixStream,
    /// Frames read from `stream`, and the bytes of the next one already read.
    reader: FrameReader,
    peer: Peer,
    name: String,
    /// This connection as the keeper of the slot it registers or resumes.
    keeper: Keeper,
    slot: Option<SlotId>,
    /// This connection, counted against its uid's limit.
    uid_conn: Option<UidConnection>,
    /// The peer's uid and groups, for queue permissions (read once, when first needed).
    access: Option<Access>,
    /// `(queue index, queue name, deque, lease word)`.
    leases: Vec<(u32, String, u32, u64)>,
}

/// Serves one connection; `permit` (its place under `--max-connections`) is given back when
/// the connection closes, not after the wait for its process to exit that may follow (a
/// process that lives on without a connection holds no connection).
async fn connection(
    st: Arc<Shared>,
    stream: UnixStream,
    permit: tokio::sync::OwnedSemaphorePermit,
    uid_conn: Option<crate::limits::UidConnection>,
) {
    let peer = match peer::identify(stream.as_fd()) {
        Ok(p) => p,
        Err(e) => {
            warn!(error = %e, "cannot identify a peer; closing");
            st.connections.fetch_sub(1, Ordering::Relaxed);
            return;
        }
    };
    debug!(pid = peer.pid, uid = peer.uid, pidfd = peer.pidfd.is_some(), "connection");
    // Counted at accept when the kernel gave the peer's uid there; else here.
    let uid_conn = match uid_conn.map(Ok).unwrap_or_else(|| st.per_uid.enter(peer.uid)) {
        Ok(g) => g,
        Err(reply) => {
            info!(pid = peer.pid, uid = peer.uid, "connection refused: {}", reply.message);
            drop(permit);
            refuse_early(stream, reply, st.cfg.io_timeout.min(REFUSAL_WAIT)).await;
            st.connections.fetch_sub(1, Ordering::Relaxed);
            return;
        }
    };
    let keeper = st.reg.keeper();
    let mut c = Conn {
        st: st.clone(),
        stream,
        reader: FrameReader::default(),
        peer,
        name: String::new(),
        keeper,
        slot: None,
        uid_conn: Some(uid_conn),
        access: None,
        leases: Vec::new(),
    };
    let end = c.run().await;
    st.connections.fetch_sub(1, Ordering::Relaxed);
    drop(c.uid_conn.take());
    drop(permit);
    let process = c.process_id();
    let Conn { stream, peer, slot, .. } = c;
    drop(stream);
    let Some(slot) = slot else { return };
    let keeps = st.reg.disconnected(slot, keeper);
    if matches!(end, ConnectionEnd::Shutdown) {
        return; // the slot and its leases stay for the next daemon
    }
    if !keeps {
        // The process resumed the slot over a newer connection, which watches it now.
        debug!(slot = slot.slot, pid = peer.pid, "connection closed; its slot is kept by a newer one");
        return;
    }
    watch_exit(st, slot, keeper, peer.pidfd, process).await;
}

/// `--max-connections`, lowered to what the file-descriptor limit `fds` can serve: each
/// connection costs a socket and a pidfd, each process slot a pidfd, plus a reserve for the
/// segment, the listener, the runtime and `/proc` reads.
fn connections_for(cfg: &Config, fds: u64, slots: u32) -> usize {
    let spare = fds.saturating_sub(64 + u64::from(slots)) / 2;
    let n = (cfg.max_connections as u64).min(spare.max(1)) as usize;
    if n < cfg.max_connections {
        warn!(
            max_connections = n,
            asked = cfg.max_connections,
            fd_limit = fds,
            "--max-connections lowered to what the file-descriptor limit allows (raise LimitNOFILE / ulimit -n)"
        );
    }
    n
}

/// Every `every`, re-queues the jobs whose claim lease has run out (with `leases`) and
/// indexes strays, until shutdown.
async fn scan(st: Arc<Shared>, every: Duration, leases: bool) {
    let mut rx = st.shutdown.subscribe();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown_requested(&mut rx) => return,
        }
        let reg = st.reg.clone();
        // A scan reads every record's state word: off the async threads.
        if let Err(e) = tokio::task::spawn_blocking(move || reg.scan(leases)).await {
            warn!(error = %e, "lease-expiry and stray scan failed");
        }
    }
}

/// Waits until `process` has exited (unless the daemon stops first), then recovers `slot`
/// if `keeper` still keeps it (a resume may have handed it to a newer connection).
/// One `sendmsg` of (a first part of) `bytes` with the segment's fd as `SCM_RIGHTS`.
fn send_fd(stream: &UnixStream, bytes: &[u8], seg: &xtcq_shm::Segment) -> io::Result<usize> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    let fds = [seg.file().as_fd()];
    anc.push(SendAncillaryMessage::ScmRights(&fds));
    Ok(rustix::net::sendmsg(stream, &[io::IoSlice::new(bytes)], &mut anc, SendFlags::NOSIGNAL)?)
}

/// Checks the segment's file at every scan ([`crate::guard`]); stops checking once it is lost
/// (the loss is kept, and the first finding was logged).
async fn watch_segment(st: Arc<Shared>) {
    let mut rx = st.shutdown.subscribe();
    let mut tick = tokio::time::interval(crate::guard::SCAN_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // Ends with the daemon: a stop waits for every task, and this one never ends
            // by itself while the segment is sound.
            _ = shutdown_requested(&mut rx) => return,
        }
        if st.guard.scan().is_some() {
            return;
        }
    }
}

async fn watch_exit(
    st: Arc<Shared>,
    slot: SlotId,
    keeper: Keeper,
    pidfd: Option<OwnedFd>,
    process: ProcessId,
) {
    let mut rx = st.shutdown.subscribe();
    let exited = async {
        if let Some(fd) = pidfd {
            match watch_pidfd(fd) {
                Ok(afd) => {
                    let _ = afd.readable().await;
                    return;
                }
                Err(e) => warn!(error = %e, "cannot watch a pidfd; polling /proc instead"),
            }
        }
        if process.pid == 0 {
            // Neither a pidfd nor a pid we can see: the connection's end is all we know.
            return;
        }
        while peer::is_alive(process.pid, process.start_time) {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    tokio::select! {
        _ = exited => {}
        _ = shutdown_requested(&mut rx) => return,
    }
    let reg = st.reg.clone();
    match tokio::task::spawn_blocking(move || reg.recover_kept(slot, keeper)).await {
        Ok(true) => {}
        Ok(false) => {
            debug!(slot = slot.slot, pid = process.pid, "process exited; its slot is kept elsewhere")
        }
        Err(e) => warn!(slot = slot.slot, error = %e, "recovery task failed"),
    }
}

/// `fd`, a pidfd, registered with the runtime: it polls readable once its process exited.
fn watch_pidfd(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: `OwnedFd` returns the same open descriptor from every `as_raw_fd` and keeps it
    // open until the `AsyncFd` that owns it is dropped.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// Resolves once the process behind `pidfd` has exited (a pidfd polls readable then);
/// never without one.
async fn peer_exited(pidfd: Option<&AsyncFd<OwnedFd>>) {
    match pidfd {
        Some(fd) => {
            let _ = fd.readable().await;
        }
        None => std::future::pending().await,
    }
}

fn sanitize(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(64).collect()
}

impl Conn {
    async fn send<T: serde::Serialize>(&mut self, msg: &T) -> bool {
        let bytes = match framing::encode(msg) {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "cannot encode a reply");
                return false;
            }
        };
        matches!(
            tokio::time::timeout(self.st.cfg.io_timeout, self.stream.write_all(&bytes)).await,
            Ok(Ok(()))
        )
    }

    /// [`send`](Self::send), with the segment's fd attached to the frame's first bytes.
    async fn send_with_segment<T: serde::Serialize>(&mut self, msg: &T) -> bool {
        let bytes = match framing::encode(msg) {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "cannot encode a reply");
                return false;
            }
        };
        let seg = self.st.reg.segment().clone();
        let first = async {
            loop {
                self.stream.writable().await?;
                match self
                    .stream
                    .try_io(tokio::io::Interest::WRITABLE, || send_fd(&self.stream, &bytes, &seg))
                {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => return r,
                }
            }
        };
        let sent = match tokio::time::timeout(self.st.cfg.io_timeout, first).await {
            Ok(Ok(n)) => n,
            _ => return false,
        };
        matches!(
            tokio::time::timeout(self.st.cfg.io_timeout, self.stream.write_all(&bytes[sent..])).await,
            Ok(Ok(()))
        )
    }

    async fn refuse(&mut self, e: ErrorReply) {
        warn!(pid = self.peer.pid, uid = self.peer.uid, code = ?e.code, "refused: {}", e.message);
        self.send(&proto::HelloReply::Refused(e)).await;
    }

    fn authorized(&self) -> bool {
        let cfg = &self.st.cfg;
        if cfg.allow_uids.contains(&self.peer.uid) || cfg.allow_gids.contains(&self.peer.gid) {
            return true;
        }
        if cfg.allow_gids.is_empty() {
            return false;
        }
        self.supplementary_groups().iter().any(|g| cfg.allow_gids.contains(g))
    }

    /// The peer's supplementary groups (empty when they cannot be read for sure).
    fn supplementary_groups(&self) -> Vec<u32> {
        if self.peer.pid == 0 {
            return Vec::new();
        }
        let Ok(groups) = peer::groups(self.peer.pid) else { return Vec::new() };
        // The groups were read by pid: trust them only if the pidfd says the process we
        // accepted is still the one alive (so the pid was not reused meanwhile).
        let still_ours = self.peer.pidfd.as_ref().is_some_and(|fd| !peer::pidfd_exited(fd.as_fd()));
        if still_ours {
            groups
        } else {
            Vec::new()
        }
    }

    /// Who this connection is, for a queue's permissions.
    fn access(&mut self) -> Access {
        if self.access.is_none() {
            let mut gids = self.supplementary_groups();
            gids.push(self.peer.gid);
            self.access = Some(Access { uid: self.peer.uid, gids });
        }
        self.access.clone().unwrap_or_default()
    }

    async fn run(&mut self) -> ConnectionEnd {
        let mut stop = self.st.shutdown.subscribe();
        let hello = match self.read_hello(&mut stop).await {
            Ok(h) => h,
            Err(end) => return end,
        };
        if !self.admit(hello).await {
            return ConnectionEnd::Closed;
        }
        info!(pid = self.peer.pid, uid = self.peer.uid, client = %self.name, "client connected");
        self.serve_requests(&mut stop).await
    }

    /// The Hello that opens the connection, within the io-timeout; a refusal is sent here.
    async fn read_hello(
        &mut self,
        stop: &mut watch::Receiver<Option<String>>,
    ) -> Result<proto::Hello, ConnectionEnd> {
        let t = self.st.cfg.io_timeout;
        let body = tokio::select! {
            r = tokio::time::timeout(t, self.reader.next(&mut self.stream, t)) => r,
            _ = shutdown_requested(stop) => return Err(ConnectionEnd::Shutdown),
        };
        let refusal = match body {
            Ok(Ok(body)) => match frame::decode(&body) {
                Ok(h) => return Ok(h),
                Err(e) => {
                    ErrorReply::new(ErrorCode::BadRequest, format!("the first message must be a Hello: {e}"))
                }
            },
            Ok(Err(FrameError::Closed)) => return Err(ConnectionEnd::Closed),
            Ok(Err(e @ FrameError::TooLarge { .. })) => {
                ErrorReply::new(ErrorCode::FrameTooLarge, e.to_string())
            }
            Ok(Err(e)) => {
                debug!(pid = self.peer.pid, error = %e, "connection broke before its Hello");
                return Err(ConnectionEnd::Closed);
            }
            Err(_) => ErrorReply::new(ErrorCode::BadRequest, format!("no Hello within {} s", t.as_secs())),
        };
        self.refuse(refusal).await;
        Err(ConnectionEnd::Closed)
    }

    /// Checks the Hello's version and the peer's right to connect, and answers it: `HelloOk`
    /// (with the segment's fd) when both pass, else the reason.
    async fn admit(&mut self, hello: proto::Hello) -> bool {
        self.name = sanitize(&hello.client_name);
        if hello.protocol_version != proto::PROTOCOL_VERSION {
            let message = format!(
                "protocol version mismatch: xtcqd speaks version {}, the client speaks version {}",
                proto::PROTOCOL_VERSION,
                hello.protocol_version
            );
            warn!(pid = self.peer.pid, client = %self.name, "{message}");
            self.send(&proto::HelloReply::VersionMismatch {
                daemon_version: proto::PROTOCOL_VERSION,
                client_version: hello.protocol_version,
                message,
            })
            .await;
            return false;
        }
        if !self.authorized() {
            let refusal = self.unauthorized();
            self.refuse(refusal).await;
            return false;
        }
        // The segment's fd rides on the reply (SCM_RIGHTS on its first byte): an authorised
        // client maps what the daemon serves, never what a path names now. A client that
        // reads with plain read(2) (an older build) simply does not get it.
        let ok = proto::HelloReply::Ok(self.st.hello.clone());
        self.send_with_segment(&ok).await
    }

    /// Why this peer may not connect. A name-service lookup per refusal only (never per
    /// accepted connection): a slow LDAP server then delays only those who are turned away.
    fn unauthorized(&self) -> ErrorReply {
        let cfg = &self.st.cfg;
        ErrorReply::new(
            ErrorCode::Unauthorized,
            format!(
                "{}, {}, is not allowed by this xtcqd (allowed: users [{}], groups [{}])",
                names::uid_label(self.peer.uid),
                names::gid_label(self.peer.gid),
                names::uid_list_label(&cfg.allow_uids),
                names::gid_list_label(&cfg.allow_gids)
            ),
        )
    }

    /// Requests and their replies, until the peer closes, breaks the connection or exits,
    /// idles past `--idle-timeout` holding no slot, or the daemon stops.
    async fn serve_requests(&mut self, stop: &mut watch::Receiver<Option<String>>) -> ConnectionEnd {
        // A forked child (without exec) inherits the connection and may hold it open long
        // after this process died: its exit, not the connection's end, is what frees its
        // jobs. The child never speaks on it (libxtcq refuses inherited handles).
        let exit_watch =
            self.peer.pidfd.as_ref().and_then(|fd| fd.try_clone().ok()).and_then(|fd| watch_pidfd(fd).ok());
        loop {
            let body = match self.next_request(stop, exit_watch.as_ref()).await {
                Ok(body) => body,
                Err(end) => return end,
            };
            if !self.answer(&body).await {
                return ConnectionEnd::Closed;
            }
        }
    }

    /// The next request frame's body, or how the connection ends instead.
    async fn next_request(
        &mut self,
        stop: &mut watch::Receiver<Option<String>>,
        exit_watch: Option<&AsyncFd<OwnedFd>>,
    ) -> Result<Vec<u8>, ConnectionEnd> {
        // A connection that holds no slot holds nothing a close would take away: it may
        // not sit on a connection others need (its client reconnects when it next asks).
        let idle = self.st.cfg.idle_timeout.filter(|_| self.slot.is_none());
        let t = self.st.cfg.io_timeout;
        let body = tokio::select! {
            biased;
            reason = shutdown_requested(stop) => {
                self.send(&ServerMessage::Event(proto::Event::ShuttingDown { reason })).await;
                return Err(ConnectionEnd::Shutdown);
            }
            _ = peer_exited(exit_watch) => {
                info!(pid = self.peer.pid, client = %self.name, "process exited while its connection stays open (inherited by a child); recovering");
                return Err(ConnectionEnd::Closed);
            }
            r = self.reader.next(&mut self.stream, t) => r,
            _ = sleep_or_never(idle) => {
                info!(pid = self.peer.pid, client = %self.name, "closing a connection that holds no process slot and was idle for {} s (--idle-timeout)", idle.unwrap_or_default().as_secs());
                return Err(ConnectionEnd::Closed);
            }
        };
        match body {
            Ok(b) => Ok(b),
            Err(FrameError::Closed) => {
                debug!(pid = self.peer.pid, client = %self.name, "client closed the connection");
                Err(ConnectionEnd::Closed)
            }
            Err(e @ FrameError::TooLarge { .. }) => {
                warn!(pid = self.peer.pid, client = %self.name, "{e}; closing");
                self.send(&ServerMessage::Reply {
                    id: proto::UNKNOWN_REQUEST_ID,
                    result: Err(ErrorReply::new(ErrorCode::FrameTooLarge, e.to_string())),
                })
                .await;
                Err(ConnectionEnd::Closed)
            }
            Err(e) => {
                warn!(pid = self.peer.pid, client = %self.name, error = %e, "connection broken");
                Err(ConnectionEnd::Closed)
            }
        }
    }

    /// Handles one request frame and sends its reply; false when the reply could not be
    /// sent. A granted Shutdown is answered, then stops the daemon (the next wait sees it).
    async fn answer(&mut self, body: &[u8]) -> bool {
        let (id, result) = match frame::decode::<proto::RequestFrame>(body) {
            Ok(f) => {
                let is_shutdown = matches!(f.request, Request::Shutdown);
                let r = self.handle(f.request).await;
                if is_shutdown && r.is_ok() {
                    self.send(&ServerMessage::Reply { id: f.id, result: r }).await;
                    self.st.stop(format!("Shutdown request from pid {}", self.peer.pid));
                    return true;
                }
                (f.id, r)
            }
            Err(e) => {
                let id = serde_json::from_slice::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| v.get("id")?.as_u64())
                    .unwrap_or(proto::UNKNOWN_REQUEST_ID);
                debug!(pid = self.peer.pid, error = %e, "malformed request");
                (id, Err(ErrorReply::new(ErrorCode::BadRequest, e.to_string())))
            }
        };
        self.send(&ServerMessage::Reply { id, result }).await
    }
}
