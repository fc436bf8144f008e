//! The daemon's memory of the segment it served, so that a daemon starting where its
//! segment is gone, or is another file, says so instead of starting empty without a word.
//!
//! The record is part of the state file (`SOCKET.state`, [`crate::persistence::state`]):
//! the segment's path and the daemon's pid beside the segment's device and inode, written
//! with the rest of the state. It is read at the next start, under the socket's lock, before
//! the segment is opened, and is only ever a reason to log.
//!
//! Older daemons kept it in a file of its own beside the socket's lock (`SOCKET.segment`,
//! `key=value` lines: the segment's path, device, inode and the pid that wrote it). A state
//! file without the record falls back to that file, so the first start of this build over
//! an older installation still compares; the old file is removed once the state file holds
//! the record ([`forget_old`]).
//!
//! Invariant: the record names the segment the last daemon on this socket served, as that
//! daemon saw it (its device and inode from `fstat` of the open file).

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use tracing::{error, warn};
use xtcq_shm::Segment;

use crate::persistence::state::StateFile;

/// What the previous daemon on this socket recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Previous {
    /// Its segment.
    pub segment: PathBuf,
    /// Device and inode of that file.
    pub id: (u64, u64),
    /// The daemon that wrote it.
    pub pid: u32,
    /// The boot it was written in (`None`: not recorded, as by older daemons).
    pub boot_id: Option<String>,
}

/// The record file older daemons kept beside `socket`.
pub fn path_for(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_os_string();
    s.push(".segment");
    PathBuf::from(s)
}

/// The previous daemon's record, if there is one we can trust: from the state file `state`,
/// or, where an older daemon wrote that, from `SOCKET.segment` beside `socket`.
pub fn read(state: &StateFile, socket: &Path) -> Option<Previous> {
    if let Some(st) = state.load() {
        if let Some(served) = st.served {
            return Some(Previous {
                segment: served.path,
                id: st.segment,
                pid: served.pid,
                boot_id: served.boot_id,
            });
        }
    }
    read_old(socket)
}

/// The record of an older daemon's `SOCKET.segment`, if there is one we can trust.
fn read_old(socket: &Path) -> Option<Previous> {
    let path = path_for(socket);
    let f = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            warn!(state = %path.display(), error = %e, "cannot read the daemon's state file; ignoring it");
            return None;
        }
    };
    let md = f.metadata().ok()?;
    if md.uid() != rustix::process::getuid().as_raw() || !md.is_file() {
        warn!(state = %path.display(), uid = md.uid(), "the daemon's state file is not ours; ignoring it");
        return None;
    }
    let mut text = String::new();
    f.take(64 * 1024).read_to_string(&mut text).ok()?;
    parse(&text)
}

fn parse(text: &str) -> Option<Previous> {
    let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix('='));
    Some(Previous {
        segment: PathBuf::from(field("segment")?),
        id: (field("dev")?.parse().ok()?, field("ino")?.parse().ok()?),
        pid: field("pid")?.parse().ok()?,
        boot_id: None,
    })
}

/// Removes an older daemon's `SOCKET.segment` beside `socket`, once the state file holds
/// the record (the registry writes it when it adopts or creates the segment). A failure is
/// logged, never fatal: a stale file is read only when the state file lacks the record.
pub fn forget_old(socket: &Path) {
    let path = path_for(socket);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warn!(state = %path.display(), error = %e, "cannot remove an older xtcqd's segment record"),
    }
}

/// Says loudly when the segment the previous daemon served is gone or is another file now.
/// `created`: this daemon created its segment (else it adopted one); `recreate`: asked to.
pub fn compare(prev: Option<&Previous>, seg: &Segment, created: bool, recreate: bool) {
    let Some(prev) = prev.filter(|p| p.segment == seg.path()) else { return };
    if recreate {
        return;
    }
    let p = seg.path().display();
    let rebooted = prev
        .boot_id
        .as_ref()
        .is_some_and(|b| crate::persistence::state::boot_id().is_some_and(|now| &now != b));
    if created && rebooted {
        // The state file outlives a reboot (the unit keeps it in /var/lib), the segment in
        // memory does not: expected, but its jobs are gone, which the operator should hear.
        warn!(
            segment = %p,
            previous_pid = prev.pid,
            "the host restarted since the previous xtcqd (pid {}) served segment {p}: a segment in \
             memory does not survive a reboot, and the jobs queued in it are gone unless they were \
             exported (--export-on-stop, --import-on-start). Started with a new, empty segment",
            prev.pid
        );
        return;
    }
    if created {
        error!(
            segment = %p,
            previous_pid = prev.pid,
            "segment {p}, which the previous xtcqd (pid {}) served on this socket, was gone: every job \
             queued in it is lost. A file is removed by hand, by systemd-logind's RemoveIPC=yes at \
             logout or by a cleaner of /dev/shm; a memfd when systemd's fd store was emptied (the \
             unit was stopped). Started with a new, empty segment",
            prev.pid
        );
        return;
    }
    let Ok(md) = seg.file().metadata() else { return };
    if (md.dev(), md.ino()) != prev.id {
        error!(
            segment = %p,
            previous_pid = prev.pid,
            "segment {p} is not the file the previous xtcqd (pid {}) served (dev {} inode {}, now dev {} \
             inode {}): it was replaced, and the jobs of the old one are lost; adopted the file now there",
            prev.pid,
            prev.id.0,
            prev.id.1,
            md.dev(),
            md.ino()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, Previous};

    #[test]
    fn a_record_parses_back() {
        let p = parse("segment=/dev/shm/x y\ndev=5\nino=77\npid=12\n").expect("parses");
        assert_eq!(p, Previous { segment: "/dev/shm/x y".into(), id: (5, 77), pid: 12, boot_id: None });
        assert_eq!(parse("segment=/x\ndev=5\n"), None);
    }
}
