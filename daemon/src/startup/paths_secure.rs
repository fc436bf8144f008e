//! Opening what the daemon owns under a shared directory without being led elsewhere.
//!
//! The socket directory, the lock file beside the socket and the segment may all sit in
//! directories other users can write (`/tmp`, `/dev/shm`), and the daemon often runs as
//! root. So nothing here follows a symbolic link in the last component of a path, and
//! everything opened is checked on its file descriptor (`fstat`), never on the path a second
//! time (no check-then-use race):
//! - the socket directory is opened with `O_DIRECTORY | O_NOFOLLOW` and must be owned by us
//!   or root, not world-writable unless sticky, and not group-writable unless sticky or its
//!   group is the configured `--group`;
//! - the lock file is opened relative to that directory's fd with `O_NOFOLLOW`, and must be
//!   a regular file of ours with one link and no group/other write bit before a byte of it
//!   is written (a planted `xtcqd.sock.lock -> /etc/shadow` is refused, not truncated);
//! - the segment is opened with `O_NOFOLLOW` and must be a regular file of ours whose mode
//!   is no wider than the configured one (a segment another user planted in `/dev/shm`
//!   is refused, not adopted).
//!
//! Links in the directories above are followed (`/var/run -> /run` is a symbolic link on
//! many systems), but each real directory above the socket directory and the segment must
//! itself be one no other user can rename entries in ([`check_ancestors`]): owned by us or
//! root, and writable by others only with the sticky bit (or by the configured group).

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use xtcq_proto::names;

use crate::DaemonError;

fn me() -> u32 {
    rustix::process::getuid().as_raw()
}

fn errno_io(what: &str, path: &Path, e: Errno) -> DaemonError {
    DaemonError::Io { what: what.into(), path: path.to_path_buf(), source: e.into() }
}

fn unsafe_file(path: &Path, why: String) -> DaemonError {
    DaemonError::UnsafeFile { path: path.to_path_buf(), why }
}

/// Refuses `path` unless every real directory above it (links resolved) is owned by us or
/// root and writable by no one else, unless sticky or by the configured `group`: else
/// another user could move our directory or file aside and put theirs in its place. A
/// missing part of the path is skipped (it is created by us, below a checked directory).
pub fn check_ancestors(path: &Path, group: Option<u32>) -> Result<(), String> {
    let mut start = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    // The nearest existing directory: what is missing we create ourselves.
    let real = loop {
        match std::fs::canonicalize(start) {
            Ok(real) => break real,
            Err(_) => match start.parent().filter(|p| !p.as_os_str().is_empty()) {
                Some(up) => start = up,
                None => break std::fs::canonicalize(".").unwrap_or_else(|_| "/".into()),
            },
        }
    };
    for dir in real.ancestors() {
        let st = rustix::fs::stat(dir).map_err(|e| format!("cannot stat {}: {e}", dir.display()))?;
        check_dir_stat(&st, group).map_err(|why| {
            format!(
                "{} above it {}; so another user could replace what is below it: use a path whose \
                 directories only root or this user can change",
                dir.display(),
                why.split(';').next().unwrap_or(&why).replacen("it is", "is", 1)
            )
        })?;
    }
    Ok(())
}

/// Opens the socket directory `dir` without following a link and checks what was opened.
pub fn open_socket_dir(dir: &Path, group: Option<u32>) -> Result<OwnedFd, DaemonError> {
    let unsafe_dir = |why: String| DaemonError::UnsafeDir { path: dir.to_path_buf(), why };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        // ELOOP: the last component is a symbolic link; ENOTDIR: it is not a directory (or a
        // link, on kernels that say so for O_DIRECTORY | O_NOFOLLOW).
        Err(e) if e == Errno::LOOP || e == Errno::NOTDIR => {
            let what = match rustix::fs::readlink(dir, Vec::new()) {
                Ok(to) => format!("it is a symbolic link (to {})", to.to_string_lossy()),
                Err(_) => "it is not a directory".into(),
            };
            return Err(unsafe_dir(format!(
                "{what}; the socket directory must be a real directory owned by us or root: remove it \
                 (after checking who made it), or use another --socket"
            )));
        }
        Err(e) => return Err(errno_io("cannot open the socket directory", dir, e)),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| errno_io("cannot stat the socket directory", dir, e))?;
    check_dir_stat(&st, group).map_err(unsafe_dir)?;
    Ok(fd)
}

/// Why a directory with `st` is not a safe socket directory, if it is not.
fn check_dir_stat(st: &Stat, group: Option<u32>) -> Result<(), String> {
    let mode = st.st_mode & 0o7777;
    let sticky = mode & 0o1000 != 0;
    if st.st_uid != me() && st.st_uid != 0 {
        return Err(format!(
            "it is owned by {}, not by us ({}) or root; remove it, or use another --socket",
            names::uid_label(st.st_uid),
            names::uid_label(me())
        ));
    }
    if mode & 0o002 != 0 && !sticky {
        return Err(format!("it is world-writable (mode {mode:o}) without the sticky bit"));
    }
    // A group that may write the directory may replace the socket; only the group the
    // daemon is told to share with may.
    if mode & 0o020 != 0 && !sticky && group != Some(st.st_gid) {
        return Err(format!(
            "it is group-writable (mode {mode:o}) by {}, which is not the configured --group; \
             chmod g-w it, or start with --group {}",
            names::gid_label(st.st_gid),
            names::group_name(st.st_gid).unwrap_or_else(|| st.st_gid.to_string())
        ));
    }
    Ok(())
}

/// Opens (creating, mode 0600) the lock file `name` in the socket directory `dir_fd`
/// without following a link, and checks it is a plain file of ours before anyone writes it.
pub fn open_lock_file(dir_fd: &OwnedFd, name: &str, path: &Path) -> Result<File, DaemonError> {
    // O_NONBLOCK: a FIFO planted at the path must not hang the open; it is refused below.
    let base = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    // An existing file is opened as it is; a missing one is created with O_EXCL, so what we
    // write to is either checked below or made by us just now. Twice: a file that appears
    // between the two opens is opened (and checked) on the second round.
    let mut last = Errno::NOENT;
    for _ in 0..2 {
        let res = match rustix::fs::openat(dir_fd, name, base, Mode::empty()) {
            Err(e) if e == Errno::NOENT => rustix::fs::openat(
                dir_fd,
                name,
                base | OFlags::CREATE | OFlags::EXCL,
                Mode::from_raw_mode(0o600),
            ),
            other => other,
        };
        match res {
            Ok(fd) => {
                check_own_file(&fd, path, 0o600, None)?;
                return Ok(File::from(fd));
            }
            Err(e) if e == Errno::EXIST => last = e,
            Err(e) if e == Errno::LOOP => {
                return Err(unsafe_file(
                    path,
                    "it is a symbolic link; it was not written. Someone may have planted it: check who \
                     owns it, remove it, and start again"
                        .into(),
                ))
            }
            Err(e) => return Err(errno_io("cannot open the lock file", path, e)),
        }
    }
    Err(errno_io("cannot create the lock file", path, last))
}

/// Opens the existing segment at `path` read-write without following a link, and checks it
/// is a plain file of ours whose mode is within `mode` (group bits only for `group`).
/// `Ok(None)` when there is no file at `path`.
pub fn open_segment(path: &Path, mode: u32, group: Option<u32>) -> Result<Option<File>, DaemonError> {
    let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd =
        match rustix::fs::open(path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) if e == Errno::NOENT => return Ok(None),
            Err(e) if e == Errno::LOOP => return Err(unsafe_file(
                path,
                "it is a symbolic link; a segment must be a plain file the daemon created. Remove the link \
                 (after checking who made it), or use another --segment"
                    .into(),
            )),
            Err(e) => return Err(errno_io("cannot open the segment", path, e)),
        };
    check_own_file(&fd, path, mode, group)?;
    Ok(Some(File::from(fd)))
}

/// Refuses what `fd` refers to unless it is a regular file owned by us, with one link and no
/// mode bits outside `allowed` (group bits only when its group is `group`).
fn check_own_file(fd: &impl AsFd, path: &Path, allowed: u32, group: Option<u32>) -> Result<(), DaemonError> {
    let st = rustix::fs::fstat(fd).map_err(|e| errno_io("cannot stat", path, e))?;
    let mode = st.st_mode & 0o7777;
    let advice = "it was not used. If you did not make it, another user may have planted it: check it, \
                  remove it, and start again";
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(unsafe_file(path, format!("it is not a regular file; {advice}")));
    }
    if st.st_uid != me() {
        return Err(unsafe_file(
            path,
            format!(
                "it is owned by {}, not by the daemon's {}; {advice}",
                names::uid_label(st.st_uid),
                names::uid_label(me())
            ),
        ));
    }
    if st.st_nlink != 1 {
        return Err(unsafe_file(path, format!("it has {} hard links, not 1; {advice}", st.st_nlink)));
    }
    let group_ok = group == Some(st.st_gid);
    let wider = mode & !allowed;
    let foreign_group = mode & 0o070 != 0 && !group_ok;
    if wider != 0 || foreign_group {
        let want = match group {
            Some(g) => format!("{allowed:04o} with group {}", names::gid_label(g)),
            None => format!("{allowed:04o}"),
        };
        return Err(unsafe_file(
            path,
            format!(
                "its mode {mode:04o} (group {}) is wider than the configured {want}, so others may have \
                 read or changed it; if you trust its contents, chmod {allowed:o} it and start again; \
                 otherwise remove it (its jobs are lost)",
                names::gid_label(st.st_gid)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_dir_stat, me, Stat};

    fn stat_of(mode: u32, uid: u32, gid: u32) -> Stat {
        // SAFETY: `Stat` is plain integers; all-zero is a valid value.
        let mut st: Stat = unsafe { std::mem::zeroed() };
        st.st_mode = libc::S_IFDIR | mode;
        st.st_uid = uid;
        st.st_gid = gid;
        st
    }

    #[test]
    fn group_writable_directories_only_for_the_configured_group() {
        let me = me();
        assert!(check_dir_stat(&stat_of(0o700, me, 4242), None).is_ok());
        assert!(check_dir_stat(&stat_of(0o1777, 0, 0), None).is_ok());
        let e = check_dir_stat(&stat_of(0o770, me, 4242), None).unwrap_err();
        assert!(e.contains("group-writable") && e.contains("--group"), "{e}");
        assert!(check_dir_stat(&stat_of(0o770, me, 4242), Some(4243)).is_err());
        assert!(check_dir_stat(&stat_of(0o770, me, 4242), Some(4242)).is_ok());
        assert!(check_dir_stat(&stat_of(0o777, me, 4242), Some(4242)).is_err());
    }
}
