//! `xtcq work`'s side of fencing: each command is a child of the worker that dies with the
//! thread that started it (`PR_SET_PDEATHSIG`), and is registered with the daemon for its
//! claim, so that the daemon kills its process group before the job can run again (the
//! worker died, or its lease expired while it was stopped). The daemon keeps registrations
//! in its state file, so they outlive a daemon restart without the worker's help; the worker
//! never blocks a running command's watch on the daemon.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use xtcq_client::{Client, JobId};

/// In the child, before its exec: makes it die (SIGKILL) with the worker thread that spawns
/// it, and refuses to go on (`ECHILD`) if the worker `parent` died before the death signal was
/// armed. Async-signal-safe: prctl and getppid, nothing allocated (no message either).
pub fn child_dies_with_worker(parent: rustix::process::Pid) -> Result<(), i32> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| e.raw_os_error())?;
    if rustix::process::getppid() != Some(parent) {
        return Err(rustix::io::Errno::CHILD.raw_os_error());
    }
    Ok(())
}

/// A command registered with the daemon for its job; forgotten by the daemon on drop.
pub struct Registration<'c> {
    client: &'c Client,
    id: JobId,
    pid: u32,
    /// Kept with the daemon when dropped (see `leave_to_daemon`).
    left: bool,
}

/// How long a registration is retried while the daemon cannot be reached (a restart takes
/// well under a second; its clients reconnect by themselves).
const UNREACHABLE_RETRY: Duration = Duration::from_secs(30);

impl<'c> Registration<'c> {
    /// Registers the command `pid` of job `id`. While the daemon cannot be reached (it is
    /// restarting), retries every 10 ms for up to `UNREACHABLE_RETRY`; a refusal is final at
    /// once. The command is held meanwhile (see `hold`), so a lease that runs out during the
    /// retries costs a refusal, never an unfenced run.
    pub fn new(
        client: &'c Client,
        id: JobId,
        generation: u32,
        pid: u32,
        cgroup: Option<(BorrowedFd<'_>, BorrowedFd<'_>)>,
    ) -> Result<Self> {
        let until = Instant::now() + UNREACHABLE_RETRY;
        loop {
            let r = match cgroup {
                Some(fds) => client.fence_command_in_cgroup(id, generation, pid, fds),
                None => client.fence_command(id, generation, pid),
            };
            match r {
                Ok(()) => break,
                Err(e) if e.is_unreachable() && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => {
                    // A daemon older than cgroup fencing does not know the request.
                    let older = cgroup.is_some()
                        && e.code() == Some(xtcq_proto::ErrorCode::BadRequest)
                        && e.to_string().contains("unknown variant");
                    let hint = if older { " (xtcqd is older than this xtcq: upgrade xtcqd)" } else { "" };
                    return Err(e).with_context(|| {
                        format!("cannot register the command of job {id} with xtcqd{hint}, so it is not run")
                    });
                }
            }
        }
        Ok(Registration { client, id, pid, left: false })
    }
}

impl Registration<'_> {
    /// Keeps the registration with the daemon: processes of the command's group outlived
    /// it, and the daemon's fence is what stops them before the job runs again.
    pub fn leave_to_daemon(mut self) {
        self.left = true;
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        // Best effort, and only over a live connection: a reconnect can take the daemon's
        // whole timeout, and the daemon forgets a registration whose group is gone by itself
        // within a second.
        if !self.left && self.client.is_connected() {
            // Not waited for: the daemon handles it before this connection's next request.
            let _ = self.client.unfence_command_nowait(self.id, self.pid);
        }
    }
}
