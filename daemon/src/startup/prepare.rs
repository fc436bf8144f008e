//! Startup: the socket directory, the single-daemon checks, the segment (create or adopt) and
//! the listening socket — everything done synchronously before the async runtime starts.
//!
//! Single-daemon rule, checked in this order:
//! 1. a lock file `SOCKET.lock` held with `flock` for the daemon's life (two daemons started
//!    at once on one socket cannot both pass);
//! 2. a socket file that accepts a connection means a live daemon: refuse; one that refuses
//!    connections is stale: remove it; a non-socket file at that path: refuse, touch nothing;
//! 3. the segment file itself is `flock`ed for the daemon's life, and a segment whose
//!    header names a live `xtcqd` as its daemon is refused too.
//!
//! Invariants: nothing is ever removed that is not a stale socket of ours or (with
//! `--recreate`) a segment no live daemon holds; files are created owner-only and widened
//! to exactly 0600 / 0660 with `chmod` (never by umask), never world-accessible.

use std::fs::{self, File};
use std::io::{self, Read, Seek, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rustix::fs::{FlockOperation, Mode};
use tracing::{info, warn};
use xtcq_shm::Segment;

use crate::server::peer;
use crate::startup::config::Config;
use crate::startup::paths_secure;
use crate::DaemonError;

/// What startup produced.
#[derive(Debug)]
pub struct Prepared {
    /// The mapped segment.
    pub segment: Arc<Segment>,
    /// Whether it was created now (else adopted).
    pub created: bool,
    /// The bound, listening socket (non-blocking).
    pub listener: UnixListener,
    /// The `--metrics` listener (non-blocking), bound before anything else.
    pub metrics: Option<std::net::TcpListener>,
    /// `(dev, ino)` of the socket file, to remove only our own at exit.
    pub socket_id: (u64, u64),
    /// The daemon-private state file beside the socket.
    pub state: crate::persistence::state::StateFile,
    /// Held for the daemon's life.
    _socket_lock: File,
    /// The segment's `flock`, on a description of its own; held for the daemon's life.
    _segment_lock: File,
}

fn io_err(what: impl Into<String>, path: &Path) -> impl FnOnce(io::Error) -> DaemonError {
    let what = what.into();
    let path = path.to_path_buf();
    move |source| DaemonError::Io { what, path, source }
}

/// `path` + `suffix`.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// Runs every startup step.
pub fn prepare(cfg: &Config) -> Result<Prepared, DaemonError> {
    // First: the fds systemd passed must be taken (and their variables cleared) before
    // anything else, and are closed on any refusal below.
    let listen = crate::startup::fdstore::take_listen_fds();
    // Before anything is made: a port someone else holds stops the start here, with nothing
    // to undo, instead of after the segment and socket exist.
    let metrics = cfg.metrics.map(bind_metrics).transpose()?;
    let dir = cfg.socket.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dir_fd = ensure_socket_dir(dir, cfg.group)?;
    let socket_lock = lock_socket(&dir_fd, &cfg.socket)?;
    let state = crate::persistence::state::StateFile::at(&cfg.state)
        .map_err(io_err("cannot use the directory of the state file (--state)", &cfg.state))?;
    clear_stale_socket(&cfg.socket)?;
    // Read under the socket's lock: the state file is the previous daemon's on this socket.
    let previous = crate::persistence::segment_memory::read(&state, &cfg.socket);
    let (segment, created) = match crate::startup::fdstore::open_segment(cfg, listen)? {
        Some((seg, created)) => (seg, created),
        None => open_segment_file(cfg)?,
    };
    let (segment, created, segment_lock) = finish_segment(cfg, segment, created)?;
    crate::persistence::segment_memory::compare(previous.as_ref(), &segment, created, cfg.recreate);
    let (listener, socket_id) = bind(cfg)?;
    Ok(Prepared {
        segment,
        created,
        listener,
        metrics,
        socket_id,
        state,
        _socket_lock: socket_lock,
        _segment_lock: segment_lock,
    })
}

/// Connections the `--metrics` listener lets wait for an accept, as the control socket does.
/// The standard library listens with 128: a burst of scrapers past it had their SYNs dropped
/// and retried a second later.
const METRICS_BACKLOG: i32 = 1024;

/// Binds the `--metrics` listener at `addr`.
fn bind_metrics(addr: std::net::SocketAddr) -> Result<std::net::TcpListener, DaemonError> {
    let bound = std::net::TcpListener::bind(addr)
        // A second listen(2) on a listening socket only sets its backlog.
        .and_then(|l| rustix::net::listen(&l, METRICS_BACKLOG).map_err(io::Error::from).map(|()| l))
        .and_then(|l| l.set_nonblocking(true).map(|()| l));
    bound.map_err(|source| DaemonError::Io {
        what: if source.kind() == io::ErrorKind::AddrInUse {
            "cannot listen for --metrics: another process holds the port; give --metrics another \
             address (or `metrics =` in the config file), one only xtcqd uses, on"
                .into()
        } else {
            "cannot listen for --metrics on".into()
        },
        path: addr.to_string().into(),
        source,
    })
}

fn ensure_socket_dir(dir: &Path, group: Option<u32>) -> Result<OwnedFd, DaemonError> {
    paths_secure::check_ancestors(dir, group)
        .map_err(|why| DaemonError::UnsafeDir { path: dir.to_path_buf(), why })?;
    if fs::symlink_metadata(dir).is_err() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(if group.is_some() { 0o750 } else { 0o700 })
            .create(dir)
            .map_err(io_err("cannot create the socket directory", dir))?;
        let fd = paths_secure::open_socket_dir(dir, None)?;
        if let Some(g) = group {
            rustix::fs::fchown(&fd, None, Some(rustix::fs::Gid::from_raw(g)))
                .map_err(|e| io_err("cannot chgrp the socket directory", dir)(e.into()))?;
        }
        info!(dir = %dir.display(), "created socket directory");
    }
    paths_secure::open_socket_dir(dir, group)
}

fn lock_socket(dir_fd: &OwnedFd, socket: &Path) -> Result<File, DaemonError> {
    let path = with_suffix(socket, ".lock");
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut f = paths_secure::open_lock_file(dir_fd, &name, &path)?;
    match rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            let mut pid = String::new();
            let _ = f.read_to_string(&mut pid);
            let pid = pid.trim();
            return Err(DaemonError::AlreadyRunning {
                socket: socket.to_path_buf(),
                detail: if pid.is_empty() {
                    format!("it holds {}", path.display())
                } else {
                    format!("pid {pid} holds {}", path.display())
                },
            });
        }
        Err(e) => return Err(io_err("cannot lock", &path)(e.into())),
    }
    let _ = f.set_len(0);
    let _ = f.rewind();
    let _ = writeln!(f, "{}", std::process::id());
    Ok(f)
}

fn clear_stale_socket(socket: &Path) -> Result<(), DaemonError> {
    let md = match fs::symlink_metadata(socket) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("cannot stat the socket path", socket)(e)),
    };
    if !md.file_type().is_socket() {
        return Err(DaemonError::NotASocket { path: socket.to_path_buf() });
    }
    match UnixStream::connect(socket) {
        Ok(_) => Err(DaemonError::AlreadyRunning {
            socket: socket.to_path_buf(),
            detail: "it accepts connections".into(),
        }),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            fs::remove_file(socket).map_err(io_err("cannot remove the stale socket", socket))?;
            info!(socket = %socket.display(), "removed stale socket");
            Ok(())
        }
        Err(e) => Err(io_err("cannot probe the existing socket", socket)(e)),
    }
}

/// Whether `pid` is a live xtcqd other than us.
fn other_live_daemon(pid: u32) -> bool {
    pid != 0
        && pid != std::process::id()
        && peer::is_alive(pid, 0)
        && peer::comm(pid).is_some_and(|c| c.starts_with("xtcqd"))
}

/// Locks the segment on an open file description of its own, which is never handed out:
/// `flock` belongs to the description, and the one in `seg` is passed to every client
/// (`SCM_RIGHTS`), which would otherwise hold the daemon's lock for as long as it lives.
fn lock_segment(seg: &Segment) -> Result<File, DaemonError> {
    use std::os::fd::AsRawFd;
    // /proc/self/fd/N opens the same inode anew (a new description), by no path anyone else
    // can change.
    let own = format!("/proc/self/fd/{}", seg.file().as_raw_fd());
    let f = File::open(&own).map_err(io_err("cannot open the segment to lock it", seg.path()))?;
    match rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(f),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(DaemonError::SegmentInUse {
            path: seg.path().to_path_buf(),
            pid: Some(seg.header_live().daemon_pid.load(Ordering::Relaxed)).filter(|p| *p != 0),
        }),
        Err(e) => Err(io_err("cannot lock the segment", seg.path())(e.into())),
    }
}

/// The `--segment` file: adopted when it exists (and `--recreate` was not asked for), else
/// created.
fn open_segment_file(cfg: &Config) -> Result<(Segment, bool), DaemonError> {
    let path = &cfg.segment;
    paths_secure::check_ancestors(path, cfg.group)
        .map_err(|why| DaemonError::UnsafeFile { path: path.clone(), why })?;
    // Opened once, without following a link, and checked (owner, mode) on the fd: a file
    // another user planted at the path is refused, not adopted or retired.
    let existing = paths_secure::open_segment(path, cfg.file_mode(), cfg.group)?;
    // Before anything is removed or created: a segment that cannot fit is refused with the
    // existing one (and its jobs) still in place. The one --recreate replaces frees its blocks.
    if existing.is_none() || cfg.recreate {
        let reclaim = existing.as_ref().map_or(0, |f| reclaimable(f, path));
        crate::startup::segment_size::check_file(&cfg.segment_config, path, reclaim)?;
    }
    if let Some(f) = existing.as_ref().filter(|_| cfg.recreate) {
        // Refuse to pull a segment from under a live daemon.
        match rustix::fs::flock(f, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                return Err(DaemonError::SegmentInUse { path: path.clone(), pid: None })
            }
            Err(e) => return Err(io_err("cannot lock the segment", path)(e.into())),
        }
        // Processes still mapping the old file (clients of the daemon that served it) would
        // go on pushing and stealing there, unseen by anyone who attaches to the new one:
        // mark it retired, which their handles check, and wake their sleeping consumers. A
        // file that does not attach (another version, corrupt) has no such clients to tell.
        match f
            .try_clone()
            .map_err(|e| e.to_string())
            .and_then(|f| Segment::attach_file(f, path).map_err(|e| e.to_string()))
        {
            Ok(old) => {
                old.retire();
                info!(segment = %path.display(), "--recreate: retired the existing segment; its clients are told");
            }
            Err(e) => {
                info!(segment = %path.display(), error = %e, "--recreate: the existing segment does not attach; not retired")
            }
        }
        fs::remove_file(path).map_err(io_err("cannot remove the segment", path))?;
        warn!(segment = %path.display(), "--recreate: removed the existing segment and its jobs");
    }
    let (seg, created) = match existing {
        Some(f) if !cfg.recreate => {
            let seg = Segment::attach_file(f, path)
                .map_err(|source| DaemonError::Adopt { path: path.clone(), source })?;
            (seg, false)
        }
        _ => (Segment::create(path, &cfg.segment_config, 0o600)?, true),
    };
    Ok((seg, created))
}

/// Bytes that removing the segment file `f` frees for the new one: its blocks, unless a
/// process registered in it may be alive. Such a process maps it, and its mapping keeps the
/// pages until it exits: the removal then frees nothing, and a size check that counted them
/// let `--recreate` remove the old segment and then fail its creation with `ENOSPC`.
fn reclaimable(f: &File, path: &Path) -> u64 {
    let blocks = f.metadata().map_or(0, |m| m.blocks().saturating_mul(512));
    // A file that does not attach (another layout, corrupt) has no client of this build.
    let Some(old) = f.try_clone().ok().and_then(|f| Segment::attach_file(f, path).ok()) else {
        return blocks;
    };
    let mapped = (0..old.config().process_slots).filter_map(|i| old.process_slot(i)).any(|s| {
        s.state.load(Ordering::Acquire) != xtcq_shm::layout::PROCESS_FREE
            && peer::is_alive(s.pid.load(Ordering::Relaxed), s.start_time.load(Ordering::Relaxed))
    });
    if mapped {
        info!(segment = %path.display(), "--recreate: processes still map the old segment; its room is not counted as freed");
        0
    } else {
        blocks
    }
}

/// Locks the segment, checks it against the flags, sets its owner and mode (a file) and
/// makes it this daemon's.
/// Returns the segment, whether it was created, and the file that holds its lock.
fn finish_segment(
    cfg: &Config,
    seg: Segment,
    created: bool,
) -> Result<(Arc<Segment>, bool, File), DaemonError> {
    let path = &seg.path().to_path_buf();
    let sealed = seg.is_sealed();
    let lock = lock_segment(&seg)?;
    let live = seg.header_live();
    let prev = live.daemon_pid.load(Ordering::Acquire);
    if other_live_daemon(prev) {
        return Err(DaemonError::SegmentInUse { path: path.clone(), pid: Some(prev) });
    }
    if !created {
        let have = seg.config();
        let mut existing = vec![
            ("queues", have.queues),
            ("deques_per_queue", have.deques_per_queue),
            ("deque_capacity", have.deque_capacity),
            ("job_records", have.job_records),
            ("payload_bytes", have.payload_bytes),
            ("process_slots", have.process_slots),
            ("overflow_capacity", have.overflow_capacity),
            ("inline_bytes", have.inline_bytes),
            ("keys", have.keys),
        ];
        // Block counts as laid out (a default resolved), against those --payload-blocks gave.
        let blocks = xtcq_shm::layout::payload::resolved_blocks(have);
        existing.extend(xtcq_shm::layout::payload::CLASS_FIELDS.iter().zip(blocks).map(|(&f, n)| (f, n)));
        for (field, given) in &cfg.explicit {
            if let Some((_, have)) = existing.iter().find(|(f, _)| f == field) {
                if have != given {
                    return Err(DaemonError::SizeMismatch {
                        path: path.clone(),
                        field,
                        existing: *have,
                        given: *given,
                    });
                }
            }
        }
    }
    // A memfd is reached only through the fd the daemon hands out: no owner or mode to set.
    if let Some(g) = cfg.group.filter(|_| !sealed) {
        rustix::fs::fchown(seg.file(), None, Some(rustix::fs::Gid::from_raw(g)))
            .map_err(|e| io_err("cannot chgrp the segment", path)(e.into()))?;
    }
    if !sealed && (created || cfg.group.is_some()) {
        rustix::fs::fchmod(seg.file(), Mode::from_raw_mode(cfg.file_mode()))
            .map_err(|e| io_err("cannot chmod the segment", path)(e.into()))?;
    }
    live.daemon_pid.store(std::process::id(), Ordering::Release);
    let epoch = live.daemon_epoch.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
    info!(
        segment = %path.display(),
        created,
        sealed,
        epoch,
        bytes = seg.descriptor().regions.total_len,
        "segment {}", if created { "created" } else { "adopted" }
    );
    Ok((Arc::new(seg), created, lock))
}

fn bind(cfg: &Config) -> Result<(UnixListener, (u64, u64)), DaemonError> {
    let path = &cfg.socket;
    use rustix::net::{socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd = socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)
        .map_err(|e| io_err("cannot make the socket", path)(e.into()))?;
    let addr = SocketAddrUnix::new(path).map_err(|e| io_err("cannot bind", path)(e.into()))?;
    // Owner-only at bind time, whatever the umask; widened by chmod below. The runtime has
    // no threads yet, so changing the process umask here races with nothing.
    let old = rustix::process::umask(Mode::from_raw_mode(0o177));
    let bound = rustix::net::bind(&fd, &addr);
    rustix::process::umask(old);
    bound.map_err(|e| {
        if e == rustix::io::Errno::ADDRINUSE {
            DaemonError::AlreadyRunning { socket: path.clone(), detail: "the address is in use".into() }
        } else {
            io_err("cannot bind", path)(e.into())
        }
    })?;
    if let Some(g) = cfg.group {
        rustix::fs::chown(path, None, Some(rustix::fs::Gid::from_raw(g)))
            .map_err(|e| io_err("cannot chgrp the socket", path)(e.into()))?;
    }
    rustix::fs::chmod(path, Mode::from_raw_mode(cfg.file_mode()))
        .map_err(|e| io_err("cannot chmod the socket", path)(e.into()))?;
    // Listening only now: a client that connects at once finds the socket with its final
    // owner and mode, never the owner-only one of the bind.
    rustix::net::listen(&fd, 1024).map_err(|e| io_err("cannot listen on", path)(e.into()))?;
    let listener = UnixListener::from(fd);
    listener.set_nonblocking(true).map_err(io_err("cannot configure the socket", path))?;
    let md = fs::symlink_metadata(path).map_err(io_err("cannot stat the socket", path))?;
    Ok((listener, (md.dev(), md.ino())))
}

/// Removes the socket file if it is still the one we bound.
pub fn remove_socket(path: &Path, id: (u64, u64)) {
    match fs::symlink_metadata(path) {
        Ok(md) if (md.dev(), md.ino()) == id => {
            if let Err(e) = fs::remove_file(path) {
                warn!(socket = %path.display(), error = %e, "cannot remove the socket");
            }
        }
        Ok(_) => warn!(socket = %path.display(), "the socket file was replaced; leaving it"),
        Err(_) => {}
    }
}
