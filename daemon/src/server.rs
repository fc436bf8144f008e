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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};
use xtcq_proto::names;
use xtcq_proto::{self as proto, ErrorCode, ErrorReply};

use crate::limits::connections::UidConnections;
use crate::registry::Registry;
use crate::startup::config::Config;
use crate::startup::{self, Prepared};
use crate::DaemonError;

pub(crate) mod connection;
mod fdrecv;
pub mod framing;
pub mod guard;
pub mod peer;

use connection::{connection, watch_exit};

use framing::FrameReader;

/// State shared by every task.
pub(crate) struct Shared {
    pub(crate) cfg: Config,
    pub(crate) reg: Registry,
    pub(crate) hello: proto::HelloOk,
    pub(crate) shutdown: watch::Sender<Option<String>>,
    pub(crate) connections: AtomicU64,
    pub(crate) per_uid: Arc<UidConnections>,
    pub(crate) my_uid: u32,
    /// The segment file's watch: once it is lost, control requests are refused.
    pub(crate) guard: guard::SegmentGuard,
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
    // The state file holds the record of the segment now; an older daemon's own file goes.
    crate::persistence::segment_memory::forget_old(&cfg.socket);
    spawn_background(&st, &mut tasks);
    // The `/metrics` listener, bound at start-up (a taken port is an error before READY=1,
    // not a silent gap in the metrics).
    if let Some(listener) = prep.metrics {
        let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| DaemonError::Io {
            what: "cannot register the --metrics listener".into(),
            path: cfg.metrics.map(|a| a.to_string()).unwrap_or_default().into(),
            source: e,
        })?;
        let run =
            crate::metrics::http::run(st.reg.clone(), listener, cfg.metrics_max_age, st.shutdown.subscribe());
        tasks.spawn(run);
    }

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
    import_on_start(&cfg, &st, !prep.created).await?;
    announce_ready(&cfg, &seg);

    let reason = accept_until_stopped(&st, &listener, max_connections, &mut tasks).await;

    let _ = crate::startup::notify::sd_notify("STOPPING=1");
    drop(listener);
    startup::remove_socket(&cfg.socket, prep.socket_id);
    drain(&mut tasks).await;
    let live = seg.header_live();
    let _ = live.daemon_pid.compare_exchange(std::process::id(), 0, Ordering::AcqRel, Ordering::Relaxed);
    export_on_stop(&cfg, &st, &seg)?;
    info!(%reason, "xtcqd stopped");
    Ok(())
}

/// `--import-on-start FILE`: imports it (on a blocking thread) before the daemon is ready;
/// `adopted`: the daemon adopted its segment (see `crate::persistence::import`).
async fn import_on_start(cfg: &Config, st: &Arc<Shared>, adopted: bool) -> Result<(), DaemonError> {
    let Some(path) = cfg.import_on_start.clone() else { return Ok(()) };
    let reg = st.reg.clone();
    tokio::task::spawn_blocking(move || crate::persistence::import::import_on_start(&reg, &path, adopted))
        .await
        .map_err(|e| DaemonError::Dump(xtcq_dump::DumpError::Import(e.to_string())))??;
    Ok(())
}

/// `--export-on-stop FILE`: the queues and jobs of `seg`, with the owners, grants and
/// backoffs this daemon kept, into a dump.
fn export_on_stop(cfg: &Config, st: &Shared, seg: &xtcq_shm::Segment) -> Result<(), DaemonError> {
    let Some(path) = &cfg.export_on_stop else { return Ok(()) };
    let (queues, jobs, skipped) = xtcq_dump::export(seg, path, |name| {
        st.reg.acl_of(name).map(crate::persistence::state::QueueAcl::into_grants)
    })?;
    info!(file = %path.display(), queues, jobs, skipped, "exported the queues and jobs");
    Ok(())
}

/// The state every task shares: the registry over `seg` (with its per-uid and fence
/// limits, from what the `fds` descriptors allow), the Hello reply, the stop signal.
fn shared_state(
    cfg: &Config,
    seg: &Arc<xtcq_shm::Segment>,
    state: crate::persistence::state::StateFile,
    fds: u64,
    max_connections: usize,
) -> Result<Arc<Shared>, DaemonError> {
    let live = seg.header_live();
    let wake_dir = crate::wake::prepare(&cfg.socket, cfg.group);
    let hello = proto::HelloOk {
        protocol_version: proto::PROTOCOL_VERSION,
        daemon_version: env!("CARGO_PKG_VERSION").to_string(),
        daemon_pid: std::process::id(),
        daemon_epoch: live.daemon_epoch.load(Ordering::Relaxed),
        segment_path: seg.path().to_path_buf(),
        segment_digest: seg.descriptor_digest(),
        wake_dir: wake_dir.clone(),
    };
    let slots_per_uid = cfg.process_slots_per_uid.unwrap_or((seg.config().process_slots / 2).max(1));
    // What the descriptors leave after the reserve, one pidfd per slot and two per
    // connection: one pidfd per fenced command.
    let fences = fds.saturating_sub(64 + u64::from(seg.config().process_slots) + 2 * max_connections as u64);
    let reg = Registry::with_state(seg.clone(), state)
        .limit_slots_per_uid(slots_per_uid, Config::unlimited_uids())
        // At most the segment's own: a share past it would make each queue's even slice
        // a quota larger than the segment (its dump then refused by the next import), or
        // divide the records among more queues than the table holds.
        .limit_share_per_uid(crate::limits::share::UidShare {
            queues: cfg.queues_per_uid.unwrap_or(seg.config().queues / 2).clamp(1, seg.config().queues),
            records: cfg
                .records_per_uid
                .unwrap_or(seg.config().job_records / 2)
                .clamp(1, seg.config().job_records),
            exempt: Config::unlimited_uids(),
        })
        .limit_fences(usize::try_from(fences).unwrap_or(usize::MAX))
        .with_wake_dir(wake_dir.map(|d| (d, cfg.group)));
    // The sockets of the bits armed in an adopted segment went with the directory's entries.
    reg.disarm_all();
    let (tx, _) = watch::channel(None);
    Ok(Arc::new(Shared {
        cfg: cfg.clone(),
        reg,
        hello,
        shutdown: tx,
        connections: AtomicU64::new(0),
        per_uid: UidConnections::new(cfg.max_connections_per_uid, Config::unlimited_uids()),
        my_uid: rustix::process::getuid().as_raw(),
        guard: guard::SegmentGuard::new(seg.clone()).map_err(|e| DaemonError::Io {
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
    tasks.spawn(crate::delay::run(st.reg.clone(), st.shutdown.subscribe()));
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
    match crate::startup::notify::sd_notify(&format!("READY=1\nMAINPID={}", std::process::id())) {
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
                Ok((stream, _)) => accept_one(st, stream, (&permits, max_connections), &refusals, tasks),
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
/// `places` is the semaphore of connection places and how many it has (`--max-connections`,
/// or fewer where the fd limit lowered it).
fn accept_one(
    st: &Arc<Shared>,
    stream: UnixStream,
    places: (&Arc<Semaphore>, usize),
    refusals: &Arc<Semaphore>,
    tasks: &mut JoinSet<()>,
) {
    let (permits, limit) = places;
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
            let reply =
                ErrorReply::new(ErrorCode::LimitReached, connections_full(limit, cfg.max_connections));
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

/// The refusal when all `limit` connection places are taken: where the fd limit lowered
/// `--max-connections` (`asked`), a higher one would change nothing, so it names `ulimit -n`.
fn connections_full(limit: usize, asked: usize) -> String {
    if limit < asked {
        format!(
            "xtcqd has {limit} connections, its limit (--max-connections {asked}, lowered to {limit} \
             by xtcqd's file-descriptor limit); try again later, or raise that limit \
             (LimitNOFILE= in its unit, ulimit -n) and restart xtcqd"
        )
    } else {
        format!(
            "xtcqd has {limit} connections, its limit (--max-connections {limit}); try again later, \
             or restart xtcqd with a higher --max-connections"
        )
    }
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
    // The first scan one interval after the start, not at once: start-up has recovered what
    // the segment held already, and a scan at once would run whenever the blocking pool got
    // to it, on a loaded host after clients had begun (it writes the validated header back,
    // which a test of a forged header once met 100 ms in).
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
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

/// Checks the segment's file at every scan ([`guard`]); stops checking once it is lost
/// (the loss is kept, and the first finding was logged).
async fn watch_segment(st: Arc<Shared>) {
    let mut rx = st.shutdown.subscribe();
    let mut tick = tokio::time::interval(guard::SCAN_EVERY);
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
