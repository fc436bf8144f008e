//! Fencing: the commands a worker (`xtcq work`) runs for its claims, stopped before their
//! job can run again.
//!
//! A worker registers each command it starts (`Request::FenceCommand`): the daemon checks
//! that the worker's slot holds the job, that the pid names a child of the worker (its parent
//! is the connected process, so the pid cannot have been reused: the worker has not reaped
//! it), of the worker's uid, leading its own process group, and that it may signal it; then
//! it keeps a pidfd for it, in its own memory and in its private state file
//! ([`crate::persistence::state`]), so that the next daemon fences it too (a worker stopped or killed
//! across a daemon restart). Nothing here ever signals a pid read from the shared segment.
//!
//! Rules kept:
//! - a registration is in the state file before it is answered (the worker starts the
//!   command only then), and leaves it only once the group is dead or the job is settled;
//! - an adopted registration is re-identified by pid and start time: a pid that now names
//!   another process is a group that is gone (Linux does not reuse a pid while a process
//!   group of that id has members), and is forgotten, never signalled.
//!
//! When the job is taken back (its holder died, or its lease expired) the recovery calls
//! [`Fences::fence`] after the revoke and before the re-queue: SIGKILL to the command through
//! its pidfd, then to every process still in its process group (found in `/proc`, each
//! re-identified through a pidfd of its own), until none is left. A group that will not die,
//! or a command the daemon may not signal, is unfenceable: the job goes to the dead letters
//! with that reason instead of running twice at once.
//!
//! A command that runs in a cgroup of its own (`Request::FenceCgroup`, see
//! [`crate::fence::cgroup`]) is fenced through the cgroup first, then through its group as
//! above: what left the group (`setsid`, a daemonizing double fork) is in the cgroup still.
//!
//! What escapes: a process that left both the command's process group and its cgroup (or
//! the group, where the worker could make no cgroup), and work the command handed to another
//! machine.

pub mod cgroup;
mod registry;
mod requests;

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use crate::fence::cgroup::Cgroup;
use crate::persistence::state::{CgroupRecord, FenceRecord};
use crate::server::peer;

/// How long a fence waits for a killed process group to be gone.
const FENCE_WAIT: Duration = Duration::from_secs(5);

/// One registered command.
struct Command {
    /// `None`: adopted from a previous daemon after the leader had exited; members of its
    /// group may remain.
    pidfd: Option<OwnedFd>,
    /// Its pid, which is also its process group id.
    pid: u32,
    start_time: u64,
    birth: u32,
    cgroup: Option<CommandCgroup>,
}

/// The cgroup of a registered command.
enum CommandCgroup {
    Held(Cgroup),
    /// Adopted from a previous daemon, and whether it is gone cannot be told: the fence fails.
    Unknown(CgroupRecord, String),
}

impl Command {
    /// Descriptors it holds (see `Fences::limit`).
    fn fds(&self) -> usize {
        usize::from(self.pidfd.is_some())
            + match &self.cgroup {
                Some(CommandCgroup::Held(c)) => c.fds(),
                _ => 0,
            }
    }

    /// The id of the cgroup it runs in, if any.
    fn cgroup_id(&self) -> Option<u64> {
        match &self.cgroup {
            Some(CommandCgroup::Held(g)) => Some(g.record().id),
            Some(CommandCgroup::Unknown(r, _)) => Some(r.id),
            None => None,
        }
    }

    /// Whether nothing of it may be running any more in its cgroup (none: nothing there).
    fn cgroup_empty(&self) -> bool {
        match &self.cgroup {
            None => true,
            Some(CommandCgroup::Held(c)) => c.populated().is_ok_and(|p| !p),
            Some(CommandCgroup::Unknown(..)) => false,
        }
    }
}

/// Registered commands, by (holder slot, record index).
#[derive(Default)]
pub struct Fences {
    commands: HashMap<(u32, u32), Command>,
    /// A registration was added or removed since [`take_changed`](Self::take_changed).
    changed: bool,
    /// The most descriptors the registrations hold at once (a pidfd each, three more with a
    /// cgroup): a fence that runs out of descriptors cannot prove a group dead (`None`: no
    /// limit).
    limit: Option<usize>,
    /// While adopting a segment without the previous daemon's registrations (its state file
    /// was missing or not trusted): a claim with no registration may still have a command
    /// running, so it cannot be proven fenced.
    lost: bool,
}

/// Why a claim is not given back while the previous daemon's registrations are unknown.
const LOST: &str = "the previous xtcqd's fence registrations were lost (its state file was missing or not \
                    trusted), so whether a command still runs this job is unknown";

/// What `/proc/PID/stat` says of a process.
struct Stat {
    state: char,
    ppid: u32,
    pgrp: u32,
    start_time: u64,
}

fn stat(pid: u32) -> io::Result<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&s).ok_or_else(|| io::Error::other(format!("cannot parse /proc/{pid}/stat")))
}

fn parse_stat(s: &str) -> Option<Stat> {
    let mut f = s[s.rfind(')')? + 1..].split_ascii_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    let start_time = f.nth(16)?.parse().ok()?;
    Some(Stat { state, ppid, pgrp, start_time })
}

fn owner_uid(pid: u32) -> io::Result<u32> {
    Ok(std::fs::metadata(format!("/proc/{pid}"))?.uid())
}

/// `pidfd_send_signal(fd, sig)`; `sig` 0 checks permission only.
pub(crate) fn send_signal(fd: BorrowedFd<'_>, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: a plain syscall on a descriptor we own; no pointers passed but a null siginfo.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Fences {
    /// Registers `pid` as the command of the job in record `index` (birth `birth`) held by
    /// `slot`, whose process is `worker` (pid, uid from the kernel); `cgroup`: the
    /// directory and `cgroup.kill` descriptors of the cgroup it runs in, if any. Returns the
    /// registrations it superseded (see `superseded_by`), forgotten.
    pub fn register(
        &mut self,
        slot: u32,
        (index, birth): (u32, u32),
        pid: u32,
        worker: (u32, u32),
        cgroup: Option<(OwnedFd, OwnedFd)>,
    ) -> Result<Vec<FenceRecord>, String> {
        let (worker_pid, worker_uid) = worker;
        let need = 1 + if cgroup.is_some() { 3 } else { 0 };
        let held: usize =
            self.commands.iter().filter(|(k, _)| **k != (slot, index)).map(|(_, c)| c.fds()).sum();
        if let Some(n) = self.limit.filter(|&n| held + need > n) {
            return Err(format!(
                "xtcqd already holds {held} descriptors for the commands it fences, and may hold {n} \
                 (what its file-descriptor limit leaves room for); raise its limit (LimitNOFILE, \
                 ulimit -n) or run fewer commands at once"
            ));
        }
        if pid == 0 || worker_pid == 0 {
            return Err("the daemon cannot see this process's pid namespace".into());
        }
        let fd = peer::pidfd_open(pid).map_err(|e| format!("cannot open a pidfd for pid {pid}: {e}"))?;
        // Read after the open: the pidfd pins the process, and a child its parent has not
        // reaped keeps its pid, so what /proc says now is about the process the pidfd names.
        let st = stat(pid).map_err(|e| format!("cannot read /proc/{pid}: {e}"))?;
        let uid = owner_uid(pid).map_err(|e| format!("cannot read /proc/{pid}: {e}"))?;
        if st.ppid != worker_pid {
            return Err(format!("pid {pid} is not a child of this process (its parent is {})", st.ppid));
        }
        if uid != worker_uid {
            return Err(format!("pid {pid} belongs to uid {uid}, not to this process's uid {worker_uid}"));
        }
        if st.pgrp != pid {
            return Err(format!("pid {pid} does not lead its own process group"));
        }
        // Another command still running for this job on this slot is not replaced (it would
        // lose its fence); the same pid again (a re-registration after a restart) is.
        if let Some(old) = self.commands.get(&(slot, index)) {
            let running = old.pidfd.as_ref().is_none_or(|fd| !peer::pidfd_exited(fd.as_fd()));
            if old.pid != pid && running {
                return Err(format!(
                    "another command (pid {}) of this job is still registered and running",
                    old.pid
                ));
            }
        }
        send_signal(fd.as_fd(), 0).map_err(|e| {
            format!(
                "xtcqd may not signal pid {pid} ({e}); it needs CAP_KILL to fence another user's commands"
            )
        })?;
        let cgroup = match cgroup {
            Some((dir, kill)) => Some(CommandCgroup::Held(Cgroup::registered(dir, kill, pid)?)),
            None => None,
        };
        let c = Command { pidfd: Some(fd), pid, start_time: st.start_time, birth, cgroup };
        let keys = self.superseded_by(slot, index, &c);
        let superseded: Vec<FenceRecord> = keys.iter().filter_map(|&(s, i)| self.record(s, i)).collect();
        for k in &keys {
            self.commands.remove(k);
        }
        self.commands.insert((slot, index), c);
        self.changed = true;
        Ok(superseded)
    }

    /// The registrations of `slot` for other records that `new` supersedes: a worker runs
    /// its next command in the cgroup its last one ended in only once that is empty, so an
    /// earlier command of that cgroup whose leader has exited is over (its word that it
    /// ended is late, or was lost with a connection). Forgotten here: its group id and its
    /// cgroup now name someone else's command.
    fn superseded_by(&self, slot: u32, index: u32, new: &Command) -> Vec<(u32, u32)> {
        let Some(id) = new.cgroup_id() else { return Vec::new() };
        self.commands
            .iter()
            .filter(|(&(s, i), old)| {
                s == slot
                    && i != index
                    && old.cgroup_id() == Some(id)
                    && old.pidfd.as_ref().is_none_or(|fd| peer::pidfd_exited(fd.as_fd()))
            })
            .map(|(k, _)| *k)
            .collect()
    }

    /// Forgets the command `pid` of record `index` held by `slot` (it exited and was reaped).
    /// Another pid's registration for the job stays: a late word about a first run must not
    /// unfence the job's next run on the same process.
    pub fn unregister(&mut self, slot: u32, index: u32, birth: u32, pid: u32) {
        if self.commands.get(&(slot, index)).is_some_and(|c| c.birth == birth && c.pid == pid) {
            self.commands.remove(&(slot, index));
            self.changed = true;
        }
    }

    /// Whether the previous daemon's registrations are unknown (see `lost`); set for the
    /// adoption of a segment, cleared after it.
    pub fn set_lost(&mut self, lost: bool) {
        self.lost = lost;
    }

    /// Sets the most registrations at once (see `limit`).
    pub fn set_limit(&mut self, n: usize) {
        self.limit = Some(n);
    }

    /// Whether a registration was added or removed since the last call (the state file is
    /// then rewritten).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// The registration of record `index` held by `slot`, as the state file keeps it.
    pub fn record(&self, slot: u32, index: u32) -> Option<FenceRecord> {
        self.commands.get(&(slot, index)).map(|c| FenceRecord {
            slot,
            index,
            birth: c.birth,
            pid: c.pid,
            start_time: c.start_time,
            cgroup: match &c.cgroup {
                Some(CommandCgroup::Held(g)) => Some(g.record().clone()),
                Some(CommandCgroup::Unknown(r, _)) => Some(r.clone()),
                None => None,
            },
        })
    }

    /// The registrations, as the state file keeps them.
    pub fn records(&self) -> Vec<FenceRecord> {
        let mut out: Vec<FenceRecord> =
            self.commands.keys().filter_map(|&(slot, index)| self.record(slot, index)).collect();
        out.sort_by_key(|r| (r.slot, r.index));
        out
    }

    /// Takes over the registrations a previous daemon kept (before anything is recovered,
    /// so that a dead holder's commands are fenced). Each is re-identified: a pid that names
    /// another process now (its start time differs) stood for a group that is gone.
    pub fn adopt(&mut self, records: &[FenceRecord]) {
        for r in records {
            let pidfd = match peer::pidfd_open(r.pid) {
                Ok(fd) => match stat(r.pid) {
                    Ok(st) if st.start_time == r.start_time => Some(fd),
                    // Another process has the pid: the group was empty when it was reused (its
                    // cgroup may not be).
                    Ok(_) if r.cgroup.is_none() => continue,
                    Ok(_) => None,
                    // Exited between the open and the read: the pidfd still names it.
                    Err(_) => Some(fd),
                },
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => None,
                Err(e) => {
                    // Not known to be gone: keep it so its group is searched when fenced.
                    tracing::warn!(pid = r.pid, "cannot open a pidfd for an adopted command: {e}");
                    None
                }
            };
            let cgroup = r.cgroup.as_ref().and_then(|g| match Cgroup::adopted(g) {
                Ok(held) => held.map(CommandCgroup::Held),
                Err(e) => {
                    tracing::warn!(pid = r.pid, cgroup = %g.path, "cannot open an adopted command's cgroup: {e}");
                    Some(CommandCgroup::Unknown(g.clone(), format!("its cgroup {} cannot be opened: {e}", g.path)))
                }
            });
            let c = Command { pidfd, pid: r.pid, start_time: r.start_time, birth: r.birth, cgroup };
            self.commands.insert((r.slot, r.index), c);
        }
    }

    /// Stops the command registered for record `index` held by `holder`, if any: `Ok` once
    /// its process group is empty, `Err(why)` when that cannot be achieved.
    pub fn fence(&mut self, index: u32, holder: u32) -> Result<(), String> {
        let removed = self.commands.remove(&(holder, index));
        self.changed |= removed.is_some();
        match removed {
            None if self.lost => Err(LOST.into()),
            Some(c) => stop(&c).inspect_err(|e| {
                tracing::warn!(
                    slot = holder,
                    record = index,
                    pid = c.pid,
                    "job dead-lettered, not re-queued: {e}"
                )
            }),
            None => Ok(()),
        }
    }

    /// Stops the command registered for record `index` whoever held it: for a claim a
    /// previous daemon revoked (it names no holder now) and died before re-queuing.
    pub fn fence_record(&mut self, index: u32) -> Result<(), String> {
        let holders: Vec<u32> = self.commands.keys().filter(|(_, i)| *i == index).map(|(s, _)| *s).collect();
        if holders.is_empty() && self.lost {
            return Err(LOST.into());
        }
        holders.into_iter().try_for_each(|h| self.fence(index, h))
    }

    /// Stops every command still registered for `slot` (its process died: whatever it
    /// started for jobs it no longer held must not outlive it either).
    pub fn fence_all_of(&mut self, slot: u32) -> Vec<String> {
        let keys: Vec<_> = self.commands.keys().filter(|(s, _)| *s == slot).copied().collect();
        self.changed |= !keys.is_empty();
        keys.into_iter().filter_map(|k| self.commands.remove(&k)).filter_map(|c| stop(&c).err()).collect()
    }

    /// Forgets the registrations whose command has exited and left nothing running in its
    /// group: there is nothing left to fence, and once the group is gone its id may name
    /// another (another user's) group. Normally the worker says so itself (`Unfence`); this
    /// catches the word that never came (the daemon was down, the worker died after
    /// reaping). Returns how many were forgotten.
    pub fn forget_finished(&mut self) -> usize {
        let finished: Vec<(u32, u32)> = self
            .commands
            .iter()
            .filter(|(_, c)| c.pidfd.as_ref().is_none_or(|fd| peer::pidfd_exited(fd.as_fd())))
            .filter(|(_, c)| group_members(c).is_ok_and(|m| m.is_empty()) && c.cgroup_empty())
            .map(|(k, _)| *k)
            .collect();
        for k in &finished {
            self.commands.remove(k);
        }
        self.changed |= !finished.is_empty();
        finished.len()
    }

    /// How many commands are registered (for stats and tests).
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }
}

/// Stops the command: its cgroup emptied first, if it has one, then its process group.
fn stop(c: &Command) -> Result<(), String> {
    match &c.cgroup {
        Some(CommandCgroup::Held(g)) => g.kill_all(FENCE_WAIT)?,
        Some(CommandCgroup::Unknown(_, why)) => return Err(why.clone()),
        None => {}
    }
    kill_group(c)
}

/// SIGKILL to the command, then to every live process of its group, until there is none.
fn kill_group(c: &Command) -> Result<(), String> {
    if let Some(fd) = &c.pidfd {
        match send_signal(fd.as_fd(), libc::SIGKILL) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(format!("its command (pid {}) could not be killed: {e}", c.pid)),
        }
    }
    let until = Instant::now() + FENCE_WAIT;
    loop {
        let members = group_members(c)?;
        if members.is_empty() {
            return Ok(());
        }
        for pid in members {
            kill_member(c, pid)?;
        }
        if Instant::now() >= until {
            return Err(format!("its command's process group {} did not die within {FENCE_WAIT:?}", c.pid));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The live (not zombie) processes of the command's group, whatever their uid (a member that
/// changed uid, e.g. through setpriv or a setuid program, is still part of the job). Empty
/// when the group id now names another group (a process with that pid leads it, with another
/// start time).
fn group_members(c: &Command) -> Result<Vec<u32>, String> {
    // Looked at before and after the walk, so that members of a new group listed before
    // its leader are not taken for ours.
    let reused = || stat(c.pid).is_ok_and(|st| st.start_time != c.start_time);
    if reused() {
        return Ok(Vec::new());
    }
    let dir = std::fs::read_dir("/proc").map_err(|e| format!("cannot read /proc to fence: {e}"))?;
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        // Gone meanwhile: not a member. Unreadable (no descriptor left): the group cannot
        // be proven empty, so the fence fails rather than take it for empty.
        let st = match stat(pid) {
            Ok(st) => st,
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {
                continue
            }
            Err(e) => return Err(format!("cannot read /proc/{pid}/stat to fence its group: {e}")),
        };
        if pid == c.pid && st.start_time != c.start_time {
            return Ok(Vec::new());
        }
        if st.pgrp != c.pid || matches!(st.state, 'Z' | 'X' | 'x') {
            continue;
        }
        out.push(pid);
    }
    Ok(if reused() { Vec::new() } else { out })
}

/// Kills one member, named by a pidfd opened for it and re-checked: still in the group. A
/// member the daemon may not signal means the group cannot be proven dead: an error, so the
/// job is dead-lettered rather than run beside it.
fn kill_member(c: &Command, pid: u32) -> Result<(), String> {
    let fd = match peer::pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(()),
        Err(e) => return Err(format!("cannot open a pidfd for pid {pid} of its command's group: {e}")),
    };
    if !stat(pid).is_ok_and(|st| st.pgrp == c.pid) {
        return Ok(());
    }
    match send_signal(fd.as_fd(), libc::SIGKILL) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        Err(e) => {
            let uid = owner_uid(pid).map(|u| u.to_string()).unwrap_or_else(|_| "?".into());
            Err(format!(
                "pid {pid} (uid {uid}) of its command's process group {} cannot be signalled: {e}",
                c.pid
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_stat;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        let rest: Vec<String> = (6..=25).map(|i| i.to_string()).collect();
        let s = format!("42 (a (b) c) S 7 42 {}", rest.join(" "));
        let st = parse_stat(&s).expect("parse");
        assert_eq!((st.state, st.ppid, st.pgrp), ('S', 7, 42));
        assert_eq!(st.start_time, 22);
    }
}
