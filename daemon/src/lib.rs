//! `xtcqd` as a library: the daemon's pieces, so that `main.rs` stays a thin shell and tests
//! can reach the parts that need no running daemon.
//!
//! - [`startup`]: the command line and config file, socket directory, single-daemon checks,
//!   segment create/adopt, bind, logging, systemd;
//! - [`persistence`]: the daemon's private files (for a restart) and `--import-on-start`;
//! - [`server`]: the tokio control-channel server: accepting, connections, framing, peer
//!   credentials, the segment file's guard, process watching;
//! - [`registry`]: process slots, deque leases, queues, recovery over the segment;
//! - the features, a module each: [`fence`], [`delay`], [`dead_letters`], [`limits`],
//!   [`flow`], [`wake`], [`metrics`].
//!
//! Invariant: the daemon is never on the jobs' hot path; it writes the segment only to
//! create and delete queues, register processes, grant and release leases, and recover.

#![warn(missing_docs)]

pub mod batches;
pub mod convert;
pub mod dead_letters;
pub mod delay;
pub mod fence;
pub mod flow;
pub mod limits;
pub mod metrics;
pub mod persistence;
pub mod registry;
pub mod server;
pub mod startup;
pub mod wake;

use std::io;
use std::path::PathBuf;

pub use startup::config::{Args, Config};
pub use startup::logging::LogFormat;

/// Why the daemon could not start, or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Bad arguments.
    #[error(transparent)]
    Config(#[from] startup::config::ConfigError),
    /// `--import-on-start` or `--export-on-stop` failed.
    #[error(transparent)]
    Dump(#[from] xtcq_dump::DumpError),
    /// Another daemon serves the socket.
    #[error("another xtcqd is already serving {socket} ({detail}); stop it first, or use another --socket")]
    AlreadyRunning {
        /// The socket.
        socket: PathBuf,
        /// How we know.
        detail: String,
    },
    /// Another daemon serves the segment.
    #[error(
        "segment {path} is in use by another live xtcqd{}; stop it first, or use another --segment",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    SegmentInUse {
        /// The segment.
        path: PathBuf,
        /// That daemon's pid, if known.
        pid: Option<u32>,
    },
    /// The segment could not be created.
    #[error(transparent)]
    Segment(#[from] xtcq_shm::SegmentError),
    /// The segment the size flags describe is too large to create, or to fit where it goes.
    #[error(transparent)]
    SegmentSize(#[from] startup::segment_size::SizeError),
    /// An existing segment could not be adopted.
    #[error("cannot adopt the existing segment {path}: {source}; remove it, or start with --recreate (which drops its jobs)")]
    Adopt {
        /// The segment.
        path: PathBuf,
        /// Why.
        source: xtcq_shm::SegmentError,
    },
    /// A size flag disagrees with the segment being adopted.
    #[error(
        "segment {path} exists with {field} = {existing}, but {given} was asked for; drop the flag to adopt \
         it as it is, or start with --recreate (which drops its jobs)"
    )]
    SizeMismatch {
        /// The segment.
        path: PathBuf,
        /// The configuration field.
        field: &'static str,
        /// Its value in the segment.
        existing: u32,
        /// The flag's value.
        given: u32,
    },
    /// The socket directory is not safe to use.
    #[error("refusing to use socket directory {path}: {why}")]
    UnsafeDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// A file the daemon would open or adopt is not provably its own.
    #[error("refusing to use {path}: {why}")]
    UnsafeFile {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to do.
        why: String,
    },
    /// Something other than a socket is at the socket path.
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// An OS error.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// On what.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The async runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] io::Error),
}

/// The first SIGTERM or SIGINT that arrived before the runtime's handlers were installed
/// (0: none). The socket accepts connections from the moment it is bound, so a client may
/// take the daemon for ready and stop it before `server::serve` has its handlers.
static EARLY_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn note_early_signal(sig: libc::c_int) {
    // Async-signal-safe: one atomic store.
    let _ = EARLY_SIGNAL.compare_exchange(
        0,
        sig,
        std::sync::atomic::Ordering::Relaxed,
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Catches SIGTERM / SIGINT into [`EARLY_SIGNAL`] until the runtime's handlers replace this.
fn catch_early_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: a zeroed sigaction with a handler that only does an atomic store, which is
        // async-signal-safe; sigaction(2) has no other requirement.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = note_early_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The signal caught before the runtime's handlers were installed, if any.
pub(crate) fn early_signal() -> Option<&'static str> {
    match EARLY_SIGNAL.load(std::sync::atomic::Ordering::Relaxed) {
        libc::SIGTERM => Some("SIGTERM"),
        libc::SIGINT => Some("SIGINT"),
        _ => None,
    }
}

/// Installs the daemon's text log subscriber (see [`startup::logging`]); [`init_logging_as`] picks
/// the format.
pub fn init_logging() {
    startup::logging::init(LogFormat::Text)
}

/// Installs the daemon's log subscriber in `format` (`--log-format`).
pub fn init_logging_as(format: LogFormat) {
    startup::logging::init(format)
}

/// Runs the daemon until SIGTERM, SIGINT or a Shutdown request.
pub fn run(cfg: Config) -> Result<(), DaemonError> {
    catch_early_signals();
    // Everything that changes process-wide state (umask) or may refuse to start happens
    // before the runtime's threads exist.
    let prep = startup::prepare(&cfg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map(|n| n.get().min(4)).unwrap_or(2))
        .thread_name("xtcqd")
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    rt.block_on(server::serve(cfg, prep))
}
