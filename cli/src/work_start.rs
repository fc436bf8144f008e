//! The start of a job's command by `xtcq work`: spawned held (`spawn`, `hold`), in its own
//! process group, in its cgroup if any (`cgroup`), dying with the worker (`fence`), and let
//! exec only once the daemon registered it for fencing.

use std::path::Path;

use anyhow::Result;
use xtcq_client::{Client, Job};

use crate::cgroup::CommandCgroup;
use crate::leftovers::kill_group;
use crate::spawn::{self, Child, Spec};
use crate::work::WorkArgs;

/// Payloads up to this size also go in `$XTCQ_PAYLOAD`; the kernel refuses any one
/// environment string over 128 KiB (MAX_ARG_STRLEN), and the command could not start at all.
const ENV_PAYLOAD_MAX: usize = 64 * 1024;

/// The variables `work` sets for each command; the worker's own values never pass through.
pub(crate) const JOB_VARIABLES: [&str; 4] = ["XTCQ_QUEUE", "XTCQ_JOB", "XTCQ_ATTEMPT", "XTCQ_PAYLOAD"];

/// The command of a job, started once the daemon registered it for fencing (see `hold`).
pub(crate) enum Started<'c> {
    Running(Child, crate::fence::Registration<'c>),
    /// The daemon refused to register it: nothing ran.
    Refused(String),
}

/// The job's command line and environment: the worker's (less `JOB_VARIABLES`, read once at
/// the start) and the job's variables.
fn spec_for(a: &WorkArgs, job: &Job<'_>, payload: &[u8]) -> std::io::Result<Spec> {
    let mut env = a.environ.clone();
    env.push(spawn::env_entry("XTCQ_QUEUE", a.queue.as_bytes())?);
    // The stable id, the same at every attempt (with $XTCQ_ATTEMPT beside it).
    env.push(spawn::env_entry("XTCQ_JOB", job.id().to_string().as_bytes())?);
    env.push(spawn::env_entry("XTCQ_ATTEMPT", job.attempts().to_string().as_bytes())?);
    match std::str::from_utf8(payload) {
        // An environment string cannot hold a NUL byte or pass the kernel's limit: such a
        // payload is on stdin only.
        Ok(s) if !s.contains('\0') && s.len() <= ENV_PAYLOAD_MAX => {
            env.push(spawn::env_entry("XTCQ_PAYLOAD", s.as_bytes())?);
        }
        _ => {}
    }
    Spec::new(a.program.as_deref().unwrap_or(Path::new(&a.cmd[0])), &a.cmd, env)
}

/// Spawns the job's command held (in `cgroup`, if any), registers it from a second thread
/// while this one (the parent the death signal watches) waits in the spawn, and lets it exec
/// once registered.
pub(crate) fn start_registered<'c>(
    a: &WorkArgs,
    c: &'c Client,
    job: &Job<'_>,
    payload: &[u8],
    cgroup: Option<&CommandCgroup<'_>>,
) -> Result<Started<'c>> {
    let spec = match spec_for(a, job, payload) {
        Ok(s) => s,
        Err(e) => return Ok(Started::Refused(format!("cannot run {:?}: {e}", a.cmd[0]))),
    };
    let in_cgroup = cgroup.map(|g| g.descriptors());
    let (child_end, parent_end) = crate::hold::hold()?;
    let (ready, go) = child_end.descriptors();
    let procs = cgroup.map(|g| g.procs_descriptor());
    let worker = rustix::process::getpid();
    // In the child, in this order: dying with this thread, its cgroup, the hold.
    let steps = move || -> Result<(), i32> {
        crate::fence::child_dies_with_worker(worker)?;
        if let Some(p) = procs {
            crate::cgroup::child_joins(p)?;
        }
        crate::hold::child_waits(ready, go)
    };
    let id = job.id();
    // The claim as held now: nothing extends the lease until the command is registered (this
    // thread waits in the spawn), so the generation cannot move meanwhile.
    let generation = job.handle().generation;
    let (spawned, registered) = std::thread::scope(|s| {
        let registering = s.spawn(move || {
            let pid = parent_end.pid()?;
            let r = crate::fence::Registration::new(c, id, generation, pid, in_cgroup);
            parent_end.answer(r.is_ok());
            Some(r)
        });
        let spawned = spawn::spawn(&spec, &steps);
        child_end.spawned();
        (spawned, registering.join())
    });
    let registered = registered.map_err(|_| anyhow::anyhow!("the thread registering a command panicked"))?;
    match (spawned, registered) {
        (Ok(child), Some(Ok(r))) => Ok(Started::Running(child, r)),
        (Err(e), Some(Err(why))) if crate::hold::was_withdrawn(&e) => {
            Ok(Started::Refused(format!("{why:#}")))
        }
        (Ok(mut child), _) => {
            // Cannot happen (the child execs only once registered); never leave it running.
            kill_group(&mut child);
            Ok(Started::Refused("its registration was lost".into()))
        }
        // Not the job's fault (the program went away, its interpreter line names nothing):
        // given back uncounted, and this worker stops (see `runnable`).
        (Err(e), _) if cgroup.is_some() => {
            Ok(Started::Refused(format!("cannot run {:?} (or move it into its cgroup): {e}", a.cmd[0])))
        }
        (Err(e), _) => Ok(Started::Refused(format!("cannot run {:?}: {e}", a.cmd[0]))),
    }
}
