//! The start of a job's command by `xtcq work`: spawned held (`spawn`, `hold`), in its own
//! process group, in its cgroup if any (`cgroup`), dying with the worker (`fence`), and let
//! exec only once the daemon registered it for fencing: the spawning thread waits in the
//! spawn while its worker's registrar, a thread that lives as long as the worker thread,
//! reads the child's pid and registers it (a thread per command cost more than the hold).

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::path::Path;
use std::sync::mpsc;

use anyhow::{Context, Result};
use xtcq_client::{Client, Job, JobId};

use crate::cgroup::CommandCgroup;
use crate::fence::Registration;
use crate::hold::HoldParent;
use crate::leftovers::kill_group;
use crate::spawn::{self, Child, Spec};
use crate::work::WorkArgs;

/// Payloads up to this size also go in `$XTCQ_PAYLOAD`; the kernel refuses any one
/// environment string over 128 KiB (MAX_ARG_STRLEN), and the command could not start at all.
const ENV_PAYLOAD_MAX: usize = 64 * 1024;

/// The variables `work` sets for each command; the worker's own values never pass through.
pub(crate) const JOB_VARIABLES: [&str; 4] = ["XTCQ_QUEUE", "XTCQ_JOB", "XTCQ_ATTEMPT", "XTCQ_PAYLOAD"];

/// What the registrar is asked: register the child that says its pid on `hold` for the claim
/// (`id`, `generation`), in the cgroup of the (directory, `cgroup.kill`) descriptors if any.
struct Ask {
    hold: HoldParent,
    id: JobId,
    generation: u32,
    cgroup: Option<(RawFd, RawFd)>,
}

/// What it answers: `None` when the child never said its pid (the spawn failed first).
type Answer<'c> = Option<Result<Registration<'c>>>;

/// A worker thread's registrar (see the module's comment); it stops when this is dropped.
pub(crate) struct Registrar<'c> {
    asks: mpsc::Sender<Ask>,
    answers: mpsc::Receiver<Answer<'c>>,
}

impl<'c> Registrar<'c> {
    /// Starts the registrar of a worker thread, within `scope`.
    pub(crate) fn start<'s>(scope: &'s std::thread::Scope<'s, 'c>, c: &'c Client) -> Result<Self> {
        let (asks, asked) = mpsc::channel::<Ask>();
        let (answer, answers) = mpsc::channel();
        std::thread::Builder::new()
            .name("xtcq-registrar".into())
            .spawn_scoped(scope, move || {
                for ask in asked {
                    if answer.send(register(c, ask)).is_err() {
                        return;
                    }
                }
            })
            .context("cannot start a thread to register the commands with xtcqd")?;
        Ok(Registrar { asks, answers })
    }

    /// Asks for the registration of the child that `hold` holds: to be awaited (`answer`)
    /// after the spawn returned.
    fn ask(
        &self,
        hold: HoldParent,
        id: JobId,
        generation: u32,
        cgroup: Option<&CommandCgroup<'_>>,
    ) -> Result<()> {
        let cgroup = cgroup.map(|g| g.descriptors()).map(|(d, k)| (d.as_raw_fd(), k.as_raw_fd()));
        self.asks
            .send(Ask { hold, id, generation, cgroup })
            .map_err(|_| anyhow::anyhow!("the thread registering commands stopped"))
    }

    fn answer(&self) -> Result<Answer<'c>> {
        self.answers.recv().map_err(|_| anyhow::anyhow!("the thread registering commands stopped"))
    }
}

/// The registrar's part: reads the child's pid, registers it, lets it exec or withdraws.
fn register(c: &Client, ask: Ask) -> Answer<'_> {
    let pid = ask.hold.pid()?;
    // SAFETY: the cgroup, and so its descriptors, outlives the spawn, which waits for this
    // registration to be answered (`start_registered`).
    let fds = ask.cgroup.map(|(d, k)| unsafe { (BorrowedFd::borrow_raw(d), BorrowedFd::borrow_raw(k)) });
    let r = Registration::new(c, ask.id, ask.generation, pid, fds);
    ask.hold.answer(r.is_ok());
    Some(r)
}

/// The command of a job, started once the daemon registered it for fencing (see `hold`).
pub(crate) enum Started<'c> {
    Running(Child, Registration<'c>),
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

/// Spawns the job's command held (in `cgroup`, if any), has `registrar` register it while
/// this thread (the parent the death signal watches) waits in the spawn, and lets it exec
/// once registered.
pub(crate) fn start_registered<'c>(
    a: &WorkArgs,
    registrar: &Registrar<'c>,
    job: &Job<'_>,
    payload: &[u8],
    cgroup: Option<&CommandCgroup<'_>>,
) -> Result<Started<'c>> {
    let spec = match spec_for(a, job, payload) {
        Ok(s) => s,
        Err(e) => return Ok(Started::Refused(format!("cannot run {:?}: {e}", a.cmd[0]))),
    };
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
    // The claim as held now: nothing extends the lease until the command is registered (this
    // thread waits in the spawn), so the generation cannot move meanwhile.
    registrar.ask(parent_end, job.id(), job.handle().generation, cgroup)?;
    let spawned = spawn::spawn(&spec, &steps);
    // Wakes the registrar if the child never said its pid, before its answer is awaited.
    child_end.spawned();
    let registered = match registrar.answer() {
        Ok(r) => r,
        Err(e) => {
            // Only if the registrar panicked: a child it let exec is not left running.
            if let Ok(mut child) = spawned {
                kill_group(&mut child);
            }
            return Err(e);
        }
    };
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
