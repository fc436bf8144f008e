//! `xtcq work`'s cgroups: where it can make cgroups (v2), each command runs in one of its
//! own, so that everything the command starts, whatever process group or session it moves
//! to (`setsid`, a double fork, `setpgid`), can be found and killed: by the worker when the
//! command ends, by the daemon (through the `cgroup.kill` descriptor handed to it) before the
//! job runs again.
//!
//! Where: below the worker's own cgroup (`/proc/self/cgroup`), found through the cgroup2
//! mount of `/proc/self/mountinfo` wherever it is mounted, as `xtcq-work.PID.N`. That takes
//! write access there: root, or a subtree delegated to the worker's user (a systemd unit or
//! scope with `Delegate=yes`). The worker stays where it is: a cgroup with processes has no
//! controllers enabled for its children (cgroup v2's "no internal processes" rule), so its
//! new children take processes.
//!
//! Rules kept:
//! - the child moves itself into the cgroup (a `write` of `0` to its `cgroup.procs`, before
//!   the hold and its exec), so the command and all it starts are in it from its
//!   first instruction, and the daemon sees it there when it registers it;
//! - whether it works is tried once at the start (a cgroup made, a child moved in, removed);
//!   elsewhere the process group alone fences, as the start line says;
//! - a worker thread runs its next command in the cgroup its last one ended in, once that
//!   is empty (the command and what it left are dead), and removes it when it stops; those a
//!   killed worker left behind are removed by the next worker that finds them empty. The
//!   daemon forgets a registration whose cgroup a newer command of the worker runs in.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags};

/// Name prefix of the cgroups `xtcq work` makes.
const PREFIX: &str = "xtcq-work.";

/// How long a cgroup's removal waits for its killed processes to be gone.
const REMOVE_WAIT: Duration = Duration::from_secs(1);

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// The cgroup `xtcq work` makes its commands' cgroups in (its own).
pub struct CgroupHome {
    dir: OwnedFd,
    path: PathBuf,
    next: AtomicU64,
}

/// The worker's cgroup v2 path (`0::PATH` of `/proc/self/cgroup`).
fn own_cgroup(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")).map(|p| p.trim_end_matches(" (deleted)"))
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal =
            b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The directory of cgroup `cgroup` under a cgroup2 mount of `mountinfo` whose root holds it.
fn cgroup_dir(mountinfo: &str, cgroup: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (mount, fs) = l.split_once(" - ")?;
        if fs.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let f: Vec<&str> = mount.split_whitespace().collect();
        let (root, point) = (unescape(f.get(3)?), unescape(f.get(4)?));
        let below = if root == "/" { cgroup } else { cgroup.strip_prefix(root.as_str())? };
        if !(below.is_empty() || below.starts_with('/')) {
            return None; // `/a/bc` is not below `/a/b`
        }
        let below = below.trim_start_matches('/');
        Some(if below.is_empty() { PathBuf::from(point) } else { Path::new(&point).join(below) })
    })
}

impl CgroupHome {
    /// The worker's own cgroup, if it can make and use cgroups there; else why not.
    pub fn find() -> Result<Self, String> {
        let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("cannot read {p}: {e}"));
        let cgroup = read("/proc/self/cgroup")?;
        let own = own_cgroup(&cgroup).ok_or("this process is in no cgroup v2 hierarchy")?.to_string();
        let path = cgroup_dir(&read("/proc/self/mountinfo")?, &own)
            .ok_or_else(|| format!("no cgroup2 mount shows this process's cgroup {own}"))?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = rustix::fs::open(&path, flags, Mode::empty())
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let home = CgroupHome { dir, path, next: AtomicU64::new(0) };
        home.sweep();
        home.try_out()
            .map_err(|e| format!("cannot run a command in a cgroup under {}: {e}", home.path.display()))?;
        Ok(home)
    }

    /// Where the commands' cgroups go.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new cgroup for a worker thread's commands.
    pub fn create(&self) -> io::Result<CommandCgroup<'_>> {
        loop {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let name = format!("{PREFIX}{}.{n}", std::process::id());
            match rustix::fs::mkdirat(&self.dir, name.as_str(), Mode::from_raw_mode(0o755)) {
                Ok(()) => {}
                // Left by an earlier worker of this pid (before a reboot, in another pid
                // namespace): not ours to use.
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(errno(e)),
            }
            return CommandCgroup::open(self, name);
        }
    }

    /// Makes a cgroup, moves a child process into it (which then exits without exec), and
    /// removes it: what every command will need.
    fn try_out(&self) -> io::Result<()> {
        let g = self.create()?;
        let mut probe = Command::new("/");
        g.join_before_exec(&mut probe);
        // SAFETY: returning an error is all this does between fork and exec.
        unsafe {
            probe.pre_exec(|| Err(io::Error::from_raw_os_error(libc_ealready())));
        }
        match probe.spawn() {
            Err(e) if e.raw_os_error() == Some(libc_ealready()) => {}
            Err(e) => return Err(e),
            Ok(mut ch) => {
                let _ = ch.kill();
                let _ = ch.wait();
                return Err(io::Error::other("the probe ran"));
            }
        }
        g.remove()
    }

    /// Removes the empty cgroups that workers no longer alive left behind.
    fn sweep(&self) {
        let Ok(entries) = rustix::fs::Dir::read_from(&self.dir) else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.strip_prefix(PREFIX).and_then(|r| r.split('.').next()?.parse::<i32>().ok())
            else {
                continue;
            };
            let dead = rustix::process::Pid::from_raw(pid)
                .is_some_and(|p| rustix::process::test_kill_process(p) == Err(rustix::io::Errno::SRCH));
            if dead {
                // Fails while anything runs in it: then it stays.
                let _ = remove_tree(self.dir.as_fd(), &name, 0);
            }
        }
    }
}

/// In a command's child, before the hold (so that the daemon finds the command in its
/// cgroup) and the exec: moves it into the cgroup of `procs` (see `procs_descriptor`).
/// Async-signal-safe: one write.
pub fn child_joins(procs: RawFd) -> Result<(), i32> {
    // SAFETY: the caller keeps the cgroup, and so the descriptor, open until the exec.
    let procs = unsafe { BorrowedFd::borrow_raw(procs) };
    rustix::io::write(procs, b"0").map(drop).map_err(|e| e.raw_os_error())
}

/// `EALREADY`: the probe's child says it joined its cgroup (and did not exec).
fn libc_ealready() -> i32 {
    rustix::io::Errno::ALREADY.raw_os_error()
}

/// One command's cgroup; removed when dropped (once empty).
pub struct CommandCgroup<'h> {
    home: &'h CgroupHome,
    name: String,
    dir: OwnedFd,
    procs: OwnedFd,
    kill: OwnedFd,
    events: OwnedFd,
    removed: bool,
}

impl<'h> CommandCgroup<'h> {
    fn open(home: &'h CgroupHome, name: String) -> io::Result<Self> {
        let flags = OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let opened = (|| {
            let dir = rustix::fs::openat(
                &home.dir,
                name.as_str(),
                flags | OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            )?;
            let procs = rustix::fs::openat(&dir, "cgroup.procs", flags | OFlags::WRONLY, Mode::empty())?;
            let kill = rustix::fs::openat(&dir, "cgroup.kill", flags | OFlags::WRONLY, Mode::empty())?;
            let events = rustix::fs::openat(&dir, "cgroup.events", flags | OFlags::RDONLY, Mode::empty())?;
            Ok((dir, procs, kill, events))
        })();
        match opened {
            Ok((dir, procs, kill, events)) => {
                Ok(CommandCgroup { home, name, dir, procs, kill, events, removed: false })
            }
            Err(e) => {
                let _ = rustix::fs::unlinkat(&home.dir, name.as_str(), AtFlags::REMOVEDIR);
                // No cgroup.kill: a kernel before 5.14.
                Err(errno(e))
            }
        }
    }

    /// Makes `cmd`'s child move itself into this cgroup before its exec (the probe's way).
    fn join_before_exec(&self, cmd: &mut Command) {
        let procs = self.procs_descriptor();
        // SAFETY: `child_joins` is an async-signal-safe system call; the descriptor stays
        // open in the parent (this cgroup outlives the spawn), so it is open in the child.
        unsafe {
            cmd.pre_exec(move || child_joins(procs).map_err(io::Error::from_raw_os_error));
        }
    }

    /// The `cgroup.procs` descriptor `child_joins` takes in a command's child; open as long
    /// as this cgroup is.
    pub fn procs_descriptor(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// The directory and `cgroup.kill` descriptors the daemon is given.
    pub fn descriptors(&self) -> (BorrowedFd<'_>, BorrowedFd<'_>) {
        (self.dir.as_fd(), self.kill.as_fd())
    }

    /// SIGKILL to everything in it (and below).
    pub fn kill(&self) -> io::Result<()> {
        match rustix::io::write(&self.kill, b"1") {
            Ok(_) | Err(rustix::io::Errno::NODEV) => Ok(()),
            Err(e) => Err(errno(e)),
        }
    }

    /// Whether anything runs in it (or below); zombies do not count.
    pub fn populated(&self) -> io::Result<bool> {
        let mut buf = [0u8; 256];
        let n = rustix::io::pread(&self.events, &mut buf, 0).map_err(errno)?;
        let text = String::from_utf8_lossy(&buf[..n]);
        Ok(text.lines().find_map(|l| l.strip_prefix("populated ")) != Some("0"))
    }

    /// Removes it; fails while anything runs in it.
    fn remove(mut self) -> io::Result<()> {
        self.removed = true;
        remove_tree(self.home.dir.as_fd(), &self.name, 0)
    }
}

impl Drop for CommandCgroup<'_> {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        // Processes just killed take a moment to be gone.
        let until = Instant::now() + REMOVE_WAIT;
        while self.populated().unwrap_or(false) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = remove_tree(self.home.dir.as_fd(), &self.name, 0);
    }
}

/// Removes cgroup `name` under `parent` and the cgroups the command made below it.
fn remove_tree(parent: BorrowedFd<'_>, name: &str, depth: usize) -> io::Result<()> {
    if depth < 16 {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        if let Ok(dir) = rustix::fs::openat(parent, name, flags, Mode::empty()) {
            if let Ok(entries) = rustix::fs::Dir::read_from(&dir) {
                for e in entries.flatten() {
                    let child = e.file_name().to_string_lossy().into_owned();
                    if e.file_type() == rustix::fs::FileType::Directory && child != "." && child != ".." {
                        let _ = remove_tree(dir.as_fd(), &child, depth + 1);
                    }
                }
            }
        }
    }
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(errno)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
24 1 0:22 / / rw - ext4 /dev/root rw
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:39 /user.slice /mnt/my\\040cg rw - cgroup2 cgroup2 rw
";

    #[test]
    fn the_own_cgroup_is_the_v2_line() {
        let text = "9:name=systemd:/\n4:memory:/x\n0::/system.slice/w.service\n";
        assert_eq!(own_cgroup(text), Some("/system.slice/w.service"));
        assert_eq!(own_cgroup("4:memory:/x\n"), None);
    }

    #[test]
    fn the_cgroup_is_found_under_a_cgroup2_mount_wherever_it_is() {
        let at = |cg| cgroup_dir(MOUNTINFO, cg);
        assert_eq!(at("/"), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(at("/a/b"), Some(PathBuf::from("/sys/fs/cgroup/unified/a/b")));
        let only_bind = "50 31 0:39 /user.slice /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup_dir(only_bind, "/user.slice/u.scope"), Some(PathBuf::from("/mnt/my cg/u.scope")));
        assert_eq!(cgroup_dir(only_bind, "/user.slicex"), None, "not below the mount's root");
        assert_eq!(cgroup_dir("24 1 0:22 / / rw - ext4 /dev/root rw\n", "/"), None, "no cgroup2 mount");
    }
}
