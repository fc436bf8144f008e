//! The cgroup side of fencing ([`crate::fence`]): a command that `xtcq work` runs in a cgroup
//! (v2) of its own is stopped whole, whatever left its process group (`setsid`, a double
//! fork, `setpgid`).
//!
//! The worker hands over two descriptors (`Request::FenceCgroup`): the cgroup's directory,
//! read-only, and its `cgroup.kill`, opened for writing, which proves the worker may kill that
//! cgroup (the daemon, root or not, gains no power from it). Checked at registration: the
//! directory is on a cgroup2 file system, the `cgroup.kill` is that directory's own (same
//! inode), and the command is in the cgroup. The daemon fences by writing `1` through that
//! descriptor, and calls the fence done only once `cgroup.events` says `populated 0` (which
//! covers child cgroups; zombies do not count).
//!
//! Rules kept:
//! - no path a client named is ever opened: the files the daemon opens are fixed names below
//!   the directory descriptor it was given, read-only;
//! - for the next daemon (a restart) the state file keeps the cgroup's path, as the kernel
//!   names the directory descriptor, and its id (inode); the path is checked to reach that
//!   very cgroup at registration. A next daemon re-opens it read-only and checks the id: a
//!   path that is gone or names another cgroup means the cgroup was removed (cgroup v2 has no
//!   rename, ids are not reused, and only an empty cgroup can be removed), so it was empty.
//!   Having no `cgroup.kill` open then, it kills the members that `cgroup.procs` lists, each
//!   through a pidfd and only if the pid is still listed after the pidfd was opened (so a
//!   reused pid is never signalled); a member it may not signal fails the fence;
//! - a cgroup that cannot be read, or does not empty within the wait, fails the fence (the
//!   job goes to the dead letters), never counts as empty.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};

use crate::persistence::state::CgroupRecord;
use crate::server::peer;

/// `statfs.f_type` of a cgroup v2 file system.
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

/// How deep below the command's cgroup a fence without `cgroup.kill` looks for members.
const MAX_DEPTH: usize = 16;

/// The most bytes of `cgroup.procs` read (about 100,000 pids).
const PROCS_MAX: usize = 1 << 20;

/// A command's cgroup, as the daemon holds it.
pub struct Cgroup {
    /// Its directory (read-only).
    dir: OwnedFd,
    /// Its `cgroup.events`, open from the registration on: a fence must not need a
    /// descriptor it may not get.
    events: OwnedFd,
    /// Its `cgroup.kill`, opened for writing by the worker (`None`: adopted after a restart).
    kill: Option<OwnedFd>,
    /// What the state file keeps.
    record: CgroupRecord,
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// A fixed name below `dir`, opened read-only.
fn open_below(dir: BorrowedFd<'_>, name: &str) -> io::Result<OwnedFd> {
    rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW, Mode::empty())
        .map_err(errno)
}

/// `(st_dev, st_ino)` of `fd`.
fn identity(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd).map_err(errno)?;
    Ok((st.st_dev, st.st_ino))
}

/// Whether `fd` is a directory of a cgroup v2 file system.
fn is_cgroup2_dir(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let fs = rustix::fs::fstatfs(fd).map_err(errno)?;
    let st = rustix::fs::fstat(fd).map_err(errno)?;
    let dir = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
    #[allow(clippy::unnecessary_cast)] // its type differs between architectures
    let magic = fs.f_type as u64;
    Ok(magic == CGROUP2_SUPER_MAGIC && dir)
}

impl Cgroup {
    /// Checks what a worker handed over for its command `pid` (see the module's rules).
    pub fn registered(dir: OwnedFd, kill: OwnedFd, pid: u32) -> Result<Self, String> {
        let io = |what: &str, e: io::Error| format!("cannot {what} of the command's cgroup: {e}");
        if !is_cgroup2_dir(dir.as_fd()).map_err(|e| io("fstat the directory", e))? {
            return Err("the first descriptor is not a cgroup v2 directory".into());
        }
        let mode =
            rustix::fs::fcntl_getfl(&kill).map_err(|e| io("read the flags of cgroup.kill", errno(e)))?;
        if (mode & OFlags::ACCMODE) == OFlags::RDONLY {
            return Err("its cgroup.kill descriptor is not open for writing".into());
        }
        let own = rustix::fs::openat(
            &dir,
            "cgroup.kill",
            OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| io("find cgroup.kill", errno(e)))?;
        if identity(own.as_fd()).map_err(|e| io("fstat cgroup.kill", e))?
            != identity(kill.as_fd()).map_err(|e| io("fstat cgroup.kill", e))?
        {
            return Err("its cgroup.kill descriptor is not the cgroup.kill of its directory".into());
        }
        if !procs(dir.as_fd()).map_err(|e| io("read cgroup.procs", e))?.contains(&pid) {
            return Err(format!("pid {pid} is not in the cgroup it was registered with"));
        }
        let events = open_below(dir.as_fd(), "cgroup.events").map_err(|e| io("open cgroup.events", e))?;
        let record = CgroupRecord {
            path: reachable_path(dir.as_fd())?,
            id: identity(dir.as_fd()).map_err(|e| io("fstat", e))?.1,
        };
        Ok(Cgroup { dir, events, kill: Some(kill), record })
    }

    /// The cgroup a previous daemon registered: `Ok(None)` when it is gone (removed, so
    /// empty); `Err` when whether it is gone cannot be told.
    pub fn adopted(r: &CgroupRecord) -> io::Result<Option<Self>> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let dir = match rustix::fs::open(r.path.as_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Ok(None),
            Err(e) => return Err(errno(e)),
        };
        if !is_cgroup2_dir(dir.as_fd())? || identity(dir.as_fd())?.1 != r.id {
            return Ok(None);
        }
        let events = match open_below(dir.as_fd(), "cgroup.events") {
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) || e.raw_os_error() == Some(libc::ENOENT) => {
                return Ok(None)
            }
            r => r?,
        };
        Ok(Some(Cgroup { dir, events, kill: None, record: r.clone() }))
    }

    /// What the state file keeps of it.
    pub fn record(&self) -> &CgroupRecord {
        &self.record
    }

    /// Descriptors it holds.
    pub fn fds(&self) -> usize {
        2 + usize::from(self.kill.is_some())
    }

    /// Whether a process runs in it or below it (`populated 1`). A removed cgroup
    /// (`ENODEV`) is empty.
    pub fn populated(&self) -> io::Result<bool> {
        let mut buf = [0u8; 256];
        let n = match rustix::io::pread(&self.events, &mut buf, 0) {
            Ok(n) => n,
            Err(rustix::io::Errno::NODEV) => return Ok(false),
            Err(e) => return Err(errno(e)),
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        match text.lines().find_map(|l| l.strip_prefix("populated ")) {
            Some("0") => Ok(false),
            Some(_) => Ok(true),
            None => Err(io::Error::other(format!("cgroup.events says no populated line: {text:?}"))),
        }
    }

    /// Kills everything in it and waits until it is empty, for up to `wait`.
    pub fn kill_all(&self, wait: Duration) -> Result<(), String> {
        let until = Instant::now() + wait;
        loop {
            let populated = self
                .populated()
                .map_err(|e| format!("cannot read {}/cgroup.events: {e}", self.record.path))?;
            if !populated {
                return Ok(());
            }
            self.kill_once()?;
            if Instant::now() >= until {
                return Err(format!("its cgroup {} did not empty within {wait:?}", self.record.path));
            }
            // cgroup.events polls PRI when it changes: wake as soon as it empties.
            let mut fds = [rustix::event::PollFd::new(&self.events, rustix::event::PollFlags::PRI)];
            let step = rustix::event::Timespec { tv_sec: 0, tv_nsec: 2_000_000 };
            let _ = rustix::event::poll(&mut fds, Some(&step));
        }
    }

    /// One kill: through `cgroup.kill` when the worker handed it over, else member by member.
    fn kill_once(&self) -> Result<(), String> {
        if let Some(kill) = &self.kill {
            match rustix::io::write(kill, b"1") {
                Ok(_) | Err(rustix::io::Errno::NODEV) => return Ok(()),
                Err(e) => {
                    tracing::warn!(cgroup = %self.record.path, "cannot write cgroup.kill ({e}); killing its members one by one")
                }
            }
        }
        kill_members(self.dir.as_fd(), &self.record.path, 0)
    }
}

/// The path by which the daemon reaches the cgroup of `dir`, checked to lead to it: what a
/// next daemon will open.
fn reachable_path(dir: BorrowedFd<'_>) -> Result<String, String> {
    let link = format!("/proc/self/fd/{}", dir.as_raw_fd());
    let path = std::fs::read_link(&link).map_err(|e| format!("cannot read {link}: {e}"))?;
    let unreachable = || {
        format!(
            "xtcqd cannot reach the command's cgroup by its path {} (it runs in another mount \
             namespace, or without /sys/fs/cgroup), so a restarted xtcqd could not fence it",
            path.display()
        )
    };
    let text = path.to_str().filter(|p| p.starts_with('/')).ok_or_else(unreachable)?.to_string();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let again = rustix::fs::open(text.as_str(), flags, Mode::empty()).map_err(|_| unreachable())?;
    match (identity(again.as_fd()), identity(dir)) {
        (Ok(a), Ok(b)) if a == b => Ok(text),
        _ => Err(unreachable()),
    }
}

/// The pids `cgroup.procs` of `dir` lists.
fn procs(dir: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    use std::io::Read;
    let fd = open_below(dir, "cgroup.procs")?;
    let mut text = String::new();
    std::fs::File::from(fd).take(PROCS_MAX as u64).read_to_string(&mut text)?;
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// SIGKILL to each member of the cgroup at `dir` and of its children, each named by a pidfd
/// whose pid is still listed once the pidfd is open.
fn kill_members(dir: BorrowedFd<'_>, path: &str, depth: usize) -> Result<(), String> {
    let gone = |e: &io::Error| matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ENOENT));
    let listed = match procs(dir) {
        Ok(p) => p,
        Err(e) if gone(&e) => return Ok(()),
        Err(e) => return Err(format!("cannot read {path}/cgroup.procs to fence it: {e}")),
    };
    for pid in listed {
        let fd = match peer::pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
            Err(e) => return Err(format!("cannot open a pidfd for pid {pid} of cgroup {path}: {e}")),
        };
        match procs(dir) {
            Ok(now) if now.contains(&pid) => {}
            Ok(_) => continue,
            Err(e) if gone(&e) => return Ok(()),
            Err(e) => return Err(format!("cannot read {path}/cgroup.procs to fence it: {e}")),
        }
        match crate::fence::send_signal(fd.as_fd(), libc::SIGKILL) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(format!("pid {pid} of cgroup {path} cannot be signalled: {e}")),
        }
    }
    if depth < MAX_DEPTH {
        for (name, child) in children(dir).map_err(|e| format!("cannot list {path}: {e}"))? {
            kill_members(child.as_fd(), &format!("{path}/{name}"), depth + 1)?;
        }
    }
    Ok(())
}

/// The child cgroups of `dir`, opened.
fn children(dir: BorrowedFd<'_>) -> io::Result<Vec<(String, OwnedFd)>> {
    let mut out = Vec::new();
    let entries = match rustix::fs::Dir::read_from(dir) {
        Ok(d) => d,
        Err(rustix::io::Errno::NODEV | rustix::io::Errno::NOENT) => return Ok(out),
        Err(e) => return Err(errno(e)),
    };
    for e in entries {
        let e = e.map_err(errno)?;
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type() != rustix::fs::FileType::Directory || name == "." || name == ".." {
            continue;
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        match rustix::fs::openat(dir, e.file_name(), flags, Mode::empty()) {
            Ok(fd) => out.push((name, fd)),
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NODEV) => {}
            Err(e) => return Err(errno(e)),
        }
    }
    Ok(out)
}
