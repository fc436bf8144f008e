//! The sealed-memfd segment and systemd's file-descriptor store, which keeps it across daemon
//! restarts and crashes.
//!
//! Under systemd with `FileDescriptorStoreMax=` set (systemd then exports `$FDSTORE`, the
//! store's size), the daemon creates its segment as a sealed memfd
//! ([`Segment::create_memfd`]) instead of a file, and hands it to systemd with
//! `FDSTORE=1` / `FDNAME=xtcq-segment` on `$NOTIFY_SOCKET` (the fd rides along as
//! `SCM_RIGHTS`). When the daemon is restarted (after a crash, `kill -9`, or a clean stop of
//! the process while the unit stays up), systemd passes the stored fd back (`$LISTEN_PID`,
//! `$LISTEN_FDS`, `$LISTEN_FDNAMES`, fds from 3 on) and the daemon adopts it. No path exists
//! that anyone could truncate, unlink or replace; clients get the fd from the daemon over the
//! control socket.
//!
//! Without an fd store (a plain `xtcqd &`), the segment is the `--segment` file, as before,
//! so that a restarted daemon can adopt it by path (see docs/src/guarantees/threat-model.md).
//!
//! Invariant: fds passed in `$LISTEN_FDS` that are not ours are closed, and the `LISTEN_*`
//! variables are removed, before any thread exists (they must not reach the commands of
//! `xtcq work` started by a client, nor be taken twice).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use tracing::{info, warn};
use xtcq_shm::Segment;

use crate::startup::config::Config;
use crate::DaemonError;

/// The name the segment's fd has in the store.
pub const FDNAME: &str = "xtcq-segment";

/// The first fd systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: RawFd = 3;

/// Takes the fds systemd passed to this process, with their names; empty when none were
/// (or they were meant for another process: `$LISTEN_PID` is not ours). Call once, before
/// any thread is started.
pub fn take_listen_fds() -> Vec<(String, OwnedFd)> {
    let pid_ok =
        std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let n = std::env::var("LISTEN_FDS").ok().and_then(|n| n.parse::<i32>().ok()).unwrap_or(0);
    let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
    for k in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(k);
    }
    if !pid_ok || n <= 0 {
        return Vec::new();
    }
    let mut names = names.split(':');
    (0..n.min(1024))
        .filter_map(|i| {
            let raw = LISTEN_FDS_START + i;
            let name = names.next().unwrap_or("unknown").to_string();
            // SAFETY: systemd's protocol passes fds LISTEN_FDS_START .. + LISTEN_FDS to this
            // pid (checked above), open, and nothing else in this process owns them.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            let _ = rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC);
            if rustix::fs::fstat(&fd).is_err() {
                std::mem::forget(fd); // not open after all: nothing to close
                return None;
            }
            Some((name, fd))
        })
        .collect()
}

/// The size of systemd's fd store for this service, when there is one to keep the segment.
fn store_size() -> Option<u32> {
    std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty())?;
    std::env::var("FDSTORE").ok()?.parse::<u32>().ok().filter(|n| *n > 0)
}

/// The segment from the fd store (adopted) or a new memfd segment put there (created);
/// `None` when there is no fd store, so the caller uses the `--segment` file.
pub fn open_segment(
    cfg: &Config,
    listen: Vec<(String, OwnedFd)>,
) -> Result<Option<(Segment, bool)>, DaemonError> {
    let mut stored = None;
    for (name, fd) in listen {
        if name == FDNAME && stored.is_none() {
            stored = Some(fd);
        } else {
            warn!(name = %name, "closing an fd passed by systemd that is not ours");
        }
    }
    let label = PathBuf::from(format!("memfd:{FDNAME}"));
    // Before the stored segment is retired by --recreate: a new one that cannot fit is
    // refused with the old one (and its jobs) still kept.
    if (stored.is_none() || cfg.recreate) && store_size().is_some() {
        crate::startup::segment_size::check_memfd(&cfg.segment_config, &label)?;
    }
    if let Some(fd) = stored {
        let seg = Segment::attach_file(File::from(fd), &label)
            .map_err(|source| DaemonError::Adopt { path: label.clone(), source })?;
        if !cfg.recreate {
            info!("adopting the segment kept in systemd's fd store");
            return Ok(Some((seg, false)));
        }
        seg.retire();
        crate::startup::notify::sd_notify(&format!("FDSTOREREMOVE=1\nFDNAME={FDNAME}"))
            .map_err(io_err("cannot remove the old segment from systemd's fd store"))?;
        warn!("--recreate: retired the segment kept in systemd's fd store and dropped it");
    }
    let Some(max) = store_size() else { return Ok(None) };
    let seg = Segment::create_memfd(FDNAME, &cfg.segment_config)?;
    let sent =
        crate::startup::notify::sd_notify_with_fd(&format!("FDSTORE=1\nFDNAME={FDNAME}"), seg.file().as_fd())
            .map_err(io_err("cannot hand the segment to systemd's fd store"))?;
    if !sent {
        return Ok(None);
    }
    info!(store = max, "created a sealed memfd segment and handed it to systemd's fd store");
    Ok(Some((seg, true)))
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> DaemonError {
    move |source| DaemonError::Io { what: what.into(), path: PathBuf::from("$NOTIFY_SOCKET"), source }
}
