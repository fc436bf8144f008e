//! Who is on the other end of a connection, and whether a process is still alive.
//!
//! - Credentials come from the kernel (`SO_PEERCRED`), never from what the peer says.
//! - A pidfd names the peer process itself, not its pid, so pid reuse cannot fool us: we take
//!   it with `SO_PEERPIDFD` at accept time (Linux 6.5+: the kernel pins the process that
//!   connected), else `pidfd_open(pid)` — which races with the pid's reuse, so we then check
//!   the start time read from `/proc` after opening against the one read before.
//! - A pidfd polls readable once the process has exited.
//! - A process is identified across daemon restarts by `(pid, start time)`: the start time
//!   (field 22 of `/proc/PID/stat`, clock ticks since boot) differs for a reused pid.
//!
//! Invariant: every function here tolerates a process that exits at any moment: it then
//! returns an error or "not alive", never a wrong identity.

use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};

/// The identity of a connected peer.
#[derive(Debug)]
pub struct Peer {
    /// Pid in our namespace (0 when the peer is in a pid namespace we cannot see into).
    pub pid: u32,
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// A pidfd for the process, when the kernel gave one.
    pub pidfd: Option<OwnedFd>,
    /// Its start time, when `/proc` showed it.
    pub start_time: Option<u64>,
}

#[cfg(any(target_arch = "sparc", target_arch = "sparc64"))]
const SO_PEERPIDFD: libc::c_int = 0x0056;
#[cfg(not(any(target_arch = "sparc", target_arch = "sparc64")))]
const SO_PEERPIDFD: libc::c_int = 77;

/// The peer's pidfd via `SO_PEERPIDFD` (Linux 6.5+).
pub fn peer_pidfd(sock: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    let mut fd: libc::c_int = -1;
    let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` and `len` are valid for writes of the sizes given; the socket fd is
    // borrowed for the duration of the call.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            &mut fd as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if fd < 0 || len as usize != core::mem::size_of::<libc::c_int>() {
        return Err(io::Error::other("SO_PEERPIDFD returned no descriptor"));
    }
    // SAFETY: the kernel just installed `fd` in our table and nothing else owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // The kernel creates it close-on-exec; make sure, since we never want it inherited.
    let _ = rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC);
    Ok(owned)
}

/// `SO_PEERCRED`: `(pid, uid, gid)` of the process that connected (pid 0 when it is in a
/// pid namespace we cannot see). Read with libc, since a pid of 0 is not a valid rustix `Pid`.
pub fn peer_cred(sock: BorrowedFd<'_>) -> io::Result<(u32, u32, u32)> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = core::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != core::mem::size_of::<libc::ucred>() {
        return Err(io::Error::other("SO_PEERCRED returned a short answer"));
    }
    Ok((cred.pid.max(0) as u32, cred.uid, cred.gid))
}

/// A pidfd for `pid` via `pidfd_open` (Linux 5.3+).
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("invalid pid {pid}")))?;
    Ok(rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?)
}

/// Whether the process a pidfd names has exited (non-blocking).
pub fn pidfd_exited(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
    let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    match rustix::event::poll(&mut fds, Some(&zero)) {
        Ok(n) => n > 0,
        // An error polling a pidfd we own cannot mean "alive" with any confidence; callers
        // only use this to confirm liveness, so err on "exited".
        Err(_) => true,
    }
}

/// Field 22 of `/proc/PID/stat`: start time in clock ticks since boot.
pub fn start_time(pid: u32) -> io::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_time(&stat).ok_or_else(|| io::Error::other(format!("cannot parse /proc/{pid}/stat")))
}

/// Parses field 22 of a `/proc/PID/stat` line. The command name (field 2) is in
/// parentheses and may contain spaces and ')', so fields are counted after the last ')'.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state); field 22 is the 20th from there.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// The supplementary groups of `pid` (the `Groups:` line of `/proc/PID/status`).
pub fn groups(pid: u32) -> io::Result<Vec<u32>> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(parse_groups(&status))
}

/// Parses the `Groups:` line of a `/proc/PID/status` text.
pub fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| g.split_ascii_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

/// The command name of `pid` (`/proc/PID/comm`).
pub fn comm(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim_end().to_string())
}

/// What we know of a process `(pid, start time)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// It runs (its start time matches, or none was recorded).
    Alive,
    /// It has exited (no such pid, or the pid names a later process).
    Dead,
    /// We cannot tell (out of file descriptors, `/proc` unreadable): never taken for dead,
    /// since recovering a live holder's claims would run its jobs twice at once.
    Unknown,
}

/// Whether the process `(pid, start)` is alive; a `start` of 0 means unknown: then any live
/// process with that pid counts. `/proc` first; when it cannot be read for a reason other
/// than the process being gone, `kill(pid, 0)` tells "no such process" from the rest.
pub fn liveness(pid: u32, start: u64) -> Liveness {
    if pid == 0 {
        return Liveness::Dead;
    }
    match start_time(pid) {
        Ok(t) if start == 0 || t == start => Liveness::Alive,
        Ok(_) => Liveness::Dead,
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {
            Liveness::Dead
        }
        Err(_) => match i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
            // The pid exists (maybe reused: we cannot check its start time now): unknown.
            Some(p) => match rustix::process::test_kill_process(p) {
                Err(rustix::io::Errno::SRCH) => Liveness::Dead,
                _ => Liveness::Unknown,
            },
            None => Liveness::Dead,
        },
    }
}

/// Whether the process `(pid, start)` may be alive: [`Liveness::Unknown`] counts as alive.
pub fn is_alive(pid: u32, start: u64) -> bool {
    liveness(pid, start) != Liveness::Dead
}

/// Opens a pidfd for `(pid, start_time)` and confirms it names that process: `Ok(None)` when
/// the process is gone (or the pid now names another one), `Err` when we cannot tell (the
/// open failed for another reason than "no such process", e.g. `EMFILE`, after a few
/// tries): the caller must then treat the process as alive and watch it another way.
pub fn pidfd_for_process(pid: u32, start: u64) -> Result<Option<OwnedFd>, io::Error> {
    let mut tries = 0;
    let fd = loop {
        match pidfd_open(pid) {
            Ok(fd) => break fd,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
            Err(e) if tries >= 3 => return Err(e),
            Err(_) => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(5 << tries));
            }
        }
    };
    // The pidfd pins whatever process had the pid when it was opened; if its start time is
    // the one we registered, it is our process.
    if pidfd_exited(fd.as_fd()) {
        return Ok(None);
    }
    match liveness(pid, start) {
        Liveness::Alive => Ok(Some(fd)),
        Liveness::Dead => Ok(None),
        Liveness::Unknown => Err(io::Error::other(format!("cannot read /proc/{pid}/stat to confirm it"))),
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (every connection costs a socket and a
/// pidfd, every adopted process a pidfd); returns the soft limit now in force.
pub fn raise_fd_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current != l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Identifies the peer of a connected Unix stream socket.
pub fn identify(sock: BorrowedFd<'_>) -> io::Result<Peer> {
    let (pid, uid, gid) = peer_cred(sock)?;
    let pidfd = match peer_pidfd(sock) {
        Ok(fd) => Some(fd),
        Err(_) if pid != 0 => pidfd_open(pid).ok(),
        Err(_) => None,
    };
    let start_time = if pid != 0 { start_time(pid).ok() } else { None };
    // With a pidfd from pidfd_open (not SO_PEERPIDFD), the process could have exited and its
    // pid been reused between SO_PEERCRED and the open: if it has exited now, the start time
    // we read may be another process's; forget it.
    let start_time = match &pidfd {
        Some(fd) if pidfd_exited(fd.as_fd()) => None,
        _ => start_time,
    };
    Ok(Peer { pid, uid, gid, pidfd, start_time })
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::{
        identify, is_alive, parse_groups, parse_start_time, peer_pidfd, pidfd_exited, pidfd_for_process,
        pidfd_open, start_time,
    };

    #[test]
    fn start_time_is_field_22_even_with_odd_command_names() {
        let fields: Vec<String> = (3..=25).map(|i| i.to_string()).collect();
        let line = format!("1234 (a) b (c)) {}", fields.join(" "));
        assert_eq!(parse_start_time(&line), Some(22));
        assert_eq!(parse_start_time("garbage"), None);
        assert_eq!(parse_start_time("1 (x) S 1 2"), None);
    }

    #[test]
    fn own_process_is_alive_and_has_a_start_time() {
        let me = std::process::id();
        let t = start_time(me).expect("own start time");
        assert!(is_alive(me, t));
        assert!(!is_alive(me, t + 1));
        assert!(!is_alive(0, 0));
        let fd = pidfd_for_process(me, t).expect("can tell").expect("own pidfd");
        assert!(!pidfd_exited(fd.as_fd()));
    }

    #[test]
    fn groups_line_is_parsed() {
        assert_eq!(parse_groups("Name:\tx\nGroups:\t4 24 27 \nUid: 0"), vec![4, 24, 27]);
        assert_eq!(parse_groups("Groups:\n"), Vec::<u32>::new());
        assert_eq!(parse_groups(""), Vec::<u32>::new());
    }

    #[test]
    fn a_socket_peer_is_identified_with_its_pidfd() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let p = identify(a.as_fd()).expect("identify");
        assert_eq!(p.pid, std::process::id());
        assert_eq!(p.uid, rustix::process::getuid().as_raw());
        assert!(p.pidfd.is_some() && p.start_time.is_some());
        match peer_pidfd(a.as_fd()) {
            Ok(fd) => assert!(!pidfd_exited(fd.as_fd())),
            // Kernels before 6.5 lack SO_PEERPIDFD; `identify` then used pidfd_open.
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => {}
            Err(e) => panic!("SO_PEERPIDFD: {e}"),
        }
    }

    #[test]
    fn pidfd_of_an_exited_child_polls_readable() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let fd = pidfd_open(child.id()).expect("pidfd");
        let _ = child.wait();
        assert!(pidfd_exited(fd.as_fd()));
    }
}
