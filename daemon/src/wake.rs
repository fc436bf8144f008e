//! The wake directory: where the sockets of descriptor waiters live (`SOCKET.wake/QUEUE.BIT`),
//! which producers send a one-byte datagram to when they wake that waiter
//! (`xtcq_shm::wake_protocol`, `xtcq_shm::wait`).
//!
//! Rules kept:
//! - only the daemon creates entries: the directory is the daemon's, 0700 (0750 for the
//!   `--group`), inside the socket directory it already secured; each socket is bound by the
//!   daemon and handed to its waiter over the control socket, so no other local user can bind
//!   a waiter's name first (a lost wake) or reach one at all without the group;
//! - a socket is 0600 (0660 for the group): the daemon's users may send to it, and a datagram
//!   carries nothing but "look again" (a stranger's datagram could only be a spurious wake);
//! - at start the directory is emptied: a socket of an earlier daemon belongs to a waiter whose
//!   control connection is gone, and which learns so from its descriptor;
//! - the names must fit a socket address: with a socket path too long for them, descriptor
//!   waits are off, with a warning, and the rest works.

pub(crate) mod registry;
mod requests;

use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tracing::{info, warn};
use xtcq_shm::wait::WakeDir;

/// The longest socket address path (`sun_path` less its NUL).
const MAX_SOCKET_PATH: usize = 107;
/// The longest name in the directory: `QUEUE.BIT`, both u32.
const LONGEST_NAME: &str = "4294967295.4294967295";

/// The wake directory beside `socket`: made (or emptied) and returned, `None` when descriptor
/// waits are off (said in the log).
pub fn prepare(socket: &Path, group: Option<u32>) -> Option<PathBuf> {
    let mut dir = socket.as_os_str().to_owned();
    dir.push(".wake");
    let dir = PathBuf::from(dir);
    if dir.as_os_str().len() + 1 + LONGEST_NAME.len() > MAX_SOCKET_PATH {
        warn!(dir = %dir.display(), "the socket path is too long for the wake directory's names: descriptor waits are off (use a shorter --socket)");
        return None;
    }
    match make(&dir, group) {
        Ok(()) => Some(dir),
        Err(e) => {
            warn!(dir = %dir.display(), "cannot prepare the wake directory, descriptor waits are off: {e}");
            None
        }
    }
}

fn make(dir: &Path, group: Option<u32>) -> std::io::Result<()> {
    let mode = if group.is_some() { 0o750 } else { 0o700 };
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() && m.uid() == rustix::process::getuid().as_raw() => {
            for e in std::fs::read_dir(dir)? {
                let _ = std::fs::remove_file(e?.path());
            }
        }
        Ok(_) => {
            return Err(std::io::Error::other(
                "it exists and is not a directory of xtcqd's user; remove it (it is made anew at start)",
            ))
        }
        Err(_) => std::fs::DirBuilder::new().mode(mode).create(dir)?,
    }
    if let Some(g) = group {
        std::os::unix::fs::chown(dir, None, Some(g))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    info!(dir = %dir.display(), "descriptor waits: wake directory ready");
    Ok(())
}

/// Binds the socket of waiter `bit` of queue-table entry `queue` in `dir` (replacing a stale
/// one of ours), readable by its waiter only; returns it (non-blocking, close-on-exec).
pub fn bind(dir: &Path, queue: u32, bit: u32, group: Option<u32>) -> std::io::Result<OwnedFd> {
    use rustix::net::{bind, socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let path = WakeDir::socket_path(dir, queue, bit);
    let _ = std::fs::remove_file(&path);
    let fd = socket_with(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    bind(&fd, &SocketAddrUnix::new(&path)?)?;
    let mode = if group.is_some() { 0o660 } else { 0o600 };
    if let Some(g) = group {
        std::os::unix::fs::chown(&path, None, Some(g))?;
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    Ok(fd)
}

/// Removes the socket of waiter `bit` of `queue`.
pub fn unbind(dir: &Path, queue: u32, bit: u32) {
    let _ = std::fs::remove_file(WakeDir::socket_path(dir, queue, bit));
}
