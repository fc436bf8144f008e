//! What a command of `xtcq work` is, to be stopped: its process group (it leads one) and,
//! where the worker can make cgroups, its cgroup (see `cgroup`), which also holds what left
//! the group (`setsid`, a double fork, `setpgid`).
//!
//! Rules kept:
//! - the command is never left running beside a settled job: when it exits, what it left in
//!   its group and its cgroup is killed and waited gone first (`stop_leftovers`);
//! - only "no such group" is an empty group: EPERM means members of another uid, which are
//!   the daemon's to stop, not gone; a cgroup that cannot be read is taken for populated.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustix::process::Pid;

use crate::cgroup::CommandCgroup;
use crate::spawn::Child;

/// How long the processes a finished command left in its group get to die.
const LEFTOVER_WAIT: Duration = Duration::from_secs(5);

/// A running command's process group and cgroup.
pub(crate) struct Scope<'h> {
    pgid: Pid,
    cgroup: Option<CommandCgroup<'h>>,
}

impl<'h> Scope<'h> {
    /// The scope of `child`, which leads its own process group (and runs in `cgroup`).
    pub(crate) fn new(child: &Child, cgroup: Option<CommandCgroup<'h>>) -> Result<Self> {
        let pgid = Pid::from_raw(child.id() as i32).context("the command has no pid")?;
        Ok(Scope { pgid, cgroup })
    }

    /// Kills the command and everything it started.
    pub(crate) fn kill(&self, child: &mut Child) {
        let _ = rustix::process::kill_process_group(self.pgid, rustix::process::Signal::KILL);
        if let Some(g) = &self.cgroup {
            let _ = g.kill();
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// After the command (the group's leader) exited: kills what it left running (a `cmd &`
    /// of a script that exited, a daemonised helper) and waits until nothing is left, so
    /// that nothing of this run goes on while the job is settled and perhaps run again;
    /// `keep_lease` meanwhile. `Err` when something would not go.
    pub(crate) fn stop_leftovers(&self, child: &mut Child, keep_lease: impl FnMut()) -> Result<ExitStatus> {
        // Before the leader is reaped its pid cannot be reused, so the group id is still ours.
        let _ = rustix::process::kill_process_group(self.pgid, rustix::process::Signal::KILL);
        if let Some(g) = &self.cgroup {
            let _ = g.kill();
        }
        let st = child.wait().context("cannot wait for the command")?;
        self.wait_empty(keep_lease)?;
        Ok(st)
    }

    /// Waits until the group has no live member and the cgroup is empty (killing what is
    /// left each time), for up to `LEFTOVER_WAIT`; `keep_lease` meanwhile.
    pub(crate) fn wait_empty(&self, mut keep_lease: impl FnMut()) -> Result<()> {
        use rustix::process::{waitid, WaitId, WaitIdOptions};
        let until = Instant::now() + LEFTOVER_WAIT;
        loop {
            // Members re-parented to this process (it is PID 1 of a container, or a
            // subreaper) are reaped here, or they would stay zombies and the group never look
            // empty.
            while let Ok(Some(_)) =
                waitid(WaitId::Pgid(Some(self.pgid)), WaitIdOptions::EXITED | WaitIdOptions::NOHANG)
            {
            }
            if !self.has_live_members() {
                return Ok(());
            }
            if Instant::now() >= until {
                bail!(
                    "processes it left in its group {:?}{} did not exit within {LEFTOVER_WAIT:?}",
                    self.pgid,
                    self.cgroup_said()
                );
            }
            let denied = rustix::process::kill_process_group(self.pgid, rustix::process::Signal::KILL)
                == Err(rustix::io::Errno::PERM);
            match &self.cgroup {
                // cgroup.kill kills whatever uid; what the group still holds may be in it.
                Some(g) => {
                    let _ = g.kill();
                }
                // EPERM: every member left is another uid's; waiting will not help.
                None if denied => bail!(
                    "processes it left in its group {:?} belong to another user and cannot be stopped by this worker",
                    self.pgid
                ),
                None => {}
            }
            keep_lease();
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Its cgroup, for the worker's next command, if nothing runs in it (else it is removed
    /// once empty, as when dropped).
    pub(crate) fn into_reusable(self) -> Option<CommandCgroup<'h>> {
        self.cgroup.filter(|g| g.populated().is_ok_and(|p| !p))
    }

    fn cgroup_said(&self) -> &'static str {
        if self.cgroup.is_some() {
            " or its cgroup"
        } else {
            ""
        }
    }

    /// Whether a process of the command is alive: a member of its group that is not a zombie,
    /// or anything in its cgroup.
    pub(crate) fn has_live_members(&self) -> bool {
        group_has_live_members(self.pgid)
            || self.cgroup.as_ref().is_some_and(|g| g.populated().unwrap_or(true))
    }
}

/// Whether process group `pgid` has a member that is not a zombie (a zombie runs nothing;
/// one whose parent does not reap it would otherwise keep the group alive for ever).
fn group_has_live_members(pgid: Pid) -> bool {
    // Only "no such group" is empty: EPERM means members of another uid (a setuid helper,
    // `sudo -u`), which are the daemon's to stop, not gone.
    if rustix::process::test_kill_process_group(pgid) == Err(rustix::io::Errno::SRCH) {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else { return true };
    dir.flatten().any(|e| {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { return false };
        // Gone meanwhile: not a member. Unreadable for another reason (no descriptor left):
        // taken for live, since waiting longer is the safe side.
        let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(s) => s,
            Err(e) => return e.kind() != std::io::ErrorKind::NotFound,
        };
        let Some((_, rest)) = stat.rsplit_once(')') else { return true };
        let mut f = rest.split_ascii_whitespace();
        let state = f.next().unwrap_or("?");
        let pgrp = f.nth(1).and_then(|g| g.parse::<i32>().ok());
        pgrp == Some(pgid.as_raw_nonzero().get()) && !matches!(state, "Z" | "X" | "x")
    })
}

/// Whether the command has exited, without reaping it (see `stop_leftovers`).
pub(crate) fn has_exited(child: &Child) -> Result<bool> {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    let pid = Pid::from_raw(child.id() as i32).context("the command has no pid")?;
    let opts = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    Ok(waitid(WaitId::Pid(pid), opts).context("cannot wait for the command")?.is_some())
}

/// A descriptor that becomes readable when the command exits (a pidfd); `None` where none
/// can be had (no descriptor left), and the caller looks at intervals instead.
pub(crate) fn exit_watch(child: &Child) -> Option<std::os::fd::OwnedFd> {
    let pid = Pid::from_raw(child.id() as i32)?;
    // The command is not reaped until we wait for it, so the pid still names it.
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// How long `wait_exit` waits at most: a second SIGINT / SIGTERM is seen within it.
const STOP_LOOK: Duration = Duration::from_millis(20);

/// Waits until the command watched by `pidfd` exits, `limit` passes (a heartbeat is due) or
/// `STOP_LOOK` passes; without a pidfd, 2 ms.
pub(crate) fn wait_exit(pidfd: Option<&std::os::fd::OwnedFd>, limit: Option<Duration>) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let Some(fd) = pidfd else {
        std::thread::sleep(Duration::from_millis(2));
        return;
    };
    let d = limit.map_or(STOP_LOOK, |l| l.min(STOP_LOOK));
    let t = Timespec { tv_sec: 0, tv_nsec: i64::from(d.subsec_nanos()) };
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    // Interrupted or failed: the caller's loop looks again.
    let _ = poll(&mut fds, Some(&t));
}

/// Kills a command that has no scope yet (it leads its own process group).
pub(crate) fn kill_group(child: &mut Child) {
    if let Some(pid) = Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}
