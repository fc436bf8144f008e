//! The long-running subcommands: `produce` (an owner that pushes stdin into its own deque)
//! and `work` (a thief that runs a command per job, `--jobs N` at a time).
//!
//! Rules `work` keeps:
//! - a job is acked only when its command exited 0; otherwise it is nacked, with the reason
//!   kept for a dead letter; it is never left claimed when `work` stops.
//! - each command runs in its own process group, so a terminal's Ctrl-C does not reach it.
//! - the first SIGINT / SIGTERM stops taking jobs and waits for the running commands; a
//!   second kills them and gives their jobs back, not counted as attempts.
//! - while a command runs, its lease is extended three times a lease; a heartbeat that
//!   fails (the job was re-queued under a stalled worker) kills the command, so one job never
//!   runs twice at once.
//! - a command starts only once the daemon has registered it (`fence`, `hold`): the daemon
//!   kills its group before the job can run again if this worker dies or stops past its lease;
//!   where this worker can make cgroups, each command also runs in one of its own (`cgroup`),
//!   which the daemon kills too, so what left the group is stopped as well (`leftovers`).

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use xtcq_client::{Client, Job, QueueInfo, RetryBackoff, ThiefHandle};

use crate::cgroup::{CgroupHome, CommandCgroup};
use crate::cmd::{connect, for_each_stdin_job};
use crate::leftovers::{has_exited, Scope};
use crate::room::Room;
use crate::spawn::Child;
use crate::work_pool::{self, Stop};
use crate::work_start::{start_registered, Registrar, Started};
use crate::work_summary::{self, Counters, Settled};
use crate::{exit, parse_duration};

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// The queue.
    queue: String,
    /// Jobs on stdin are separated by NUL bytes instead of newlines.
    #[arg(short = '0', long)]
    null: bool,
    /// How long to wait for room when the queue is full before giving up.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    timeout: Duration,
    /// The jobs' priority: 0 (the most urgent, the default) to the queue's --levels minus 1.
    #[arg(long, default_value_t = 0)]
    priority: u32,
    /// Add the jobs to this batch (opened with `xtcq batch open`, not yet sealed).
    #[arg(long, value_name = "NAME")]
    batch: Option<String>,
    /// Seal the batch once every line of stdin was pushed (the only producer of the batch).
    #[arg(long, requires = "batch")]
    seal: bool,
}

pub fn produce(socket: Option<&Path>, a: ProduceArgs) -> Result<i32> {
    let c = connect(socket)?;
    let owner = c.attach_owner(&a.queue)?;
    if let Some(name) = &a.batch {
        owner.set_batch(Some(&c.batch_progress(&a.queue, name)?));
    }
    let t0 = Instant::now();
    let mut room = Room::new(&a.queue, a.timeout);
    let n = for_each_stdin_job(a.null, owner.payload_capacity(), |p| {
        room.push(|p| owner.push_priority(p, a.priority), p)?;
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    if std::io::stderr().is_terminal() {
        eprintln!("xtcq: pushed {n} job(s) to {} in {secs:.2} s", a.queue);
    }
    // Jobs left in the deque stay there for thieves.
    owner.detach()?;
    if let (Some(name), true) = (&a.batch, a.seal) {
        c.seal_batch(&a.queue, name)?;
    }
    Ok(exit::OK)
}

#[derive(Debug, Args)]
pub struct WorkArgs {
    /// The queue.
    pub(crate) queue: String,
    /// Commands to run at once (1 to 1024; also bounded by the process's thread and file
    /// limits).
    #[arg(long, short = 'j', default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=MAX_JOBS as i64))]
    pub(crate) jobs: u32,
    /// Claim lease for each job, extended while its command runs (default: the queue's);
    /// whole milliseconds, at least 1ms.
    #[arg(long, value_parser = crate::parse_claim_lease)]
    lease: Option<Duration>,
    /// Stop after this many jobs (0: no limit).
    #[arg(long, default_value_t = 0)]
    max_jobs: u64,
    /// Stop once the queue has been empty for this long (default: run until signalled).
    #[arg(long, value_parser = parse_duration)]
    idle_exit: Option<Duration>,
    /// Print a line per job (job, attempt, exit status) on stderr.
    #[arg(long, short = 'v')]
    verbose: bool,
    /// The command and its arguments, after `--`.
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub(crate) cmd: Vec<String>,
    /// The file the command's name resolved to (see `runnable::resolve`), once.
    #[arg(skip)]
    pub(crate) program: Option<std::path::PathBuf>,
    /// The worker's environment, less the variables set per job, read once.
    #[arg(skip)]
    pub(crate) environ: Vec<std::ffi::CString>,
}

/// The most commands `work` runs at once: each is a thread, a child process and a few file
/// descriptors; past this a machine's limits, not the queue, decide, and the failure would
/// come late (a thread or a fork refused mid-run) instead of as an error at the start.
pub const MAX_JOBS: u32 = 1024;

/// File descriptors one running command costs `work` (its stdin pipe, the two pipes that hold
/// it until registered, the slack of a spawn's own error pipe, four of its cgroup's), and
/// those `work` needs besides.
const FDS_PER_JOB: u64 = 10;
const FDS_BASE: u64 = 64;

/// Refuses a `--jobs` the process's limits cannot serve, before any job is taken: otherwise
/// the command spawns would fail one by one and their jobs be failed, not the invocation.
fn check_jobs_fit(jobs: u32) -> Result<()> {
    use rustix::process::{getrlimit, Resource};
    let fds = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    let need = FDS_BASE + FDS_PER_JOB * u64::from(jobs);
    if need > fds {
        let fit = fds.saturating_sub(FDS_BASE) / FDS_PER_JOB;
        let what = if fit == 0 {
            format!("raise the limit to at least {need} (even --jobs 1 needs {})", FDS_BASE + FDS_PER_JOB)
        } else {
            format!("lower --jobs to at most {fit} or raise the limit")
        };
        bail!(
            "--jobs {jobs} needs about {need} file descriptors, but this process may open {fds} \
             (ulimit -n); {what}"
        );
    }
    Ok(())
}

/// Raises the soft file-descriptor limit to the hard one: a worker running many commands
/// should not fail on a default soft limit (often 1024) that it may lift itself.
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current != l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
}

/// What became of a job's command.
enum Ran<'h> {
    /// It exited.
    Exited(ExitStatus),
    /// It was killed: the job stopped being ours (a heartbeat failed: the lease ran out and
    /// the job was re-queued).
    Killed(String),
    /// `work` was told to stop now (a second SIGINT / SIGTERM) and killed it: the job did
    /// not fail, so it goes back without counting an attempt.
    Interrupted,
    /// The daemon would not fence it (see `fence`), so it was killed at once: the job goes
    /// back uncounted and this worker stops.
    Unfenced(String),
    /// Processes of its group or cgroup outlived it and this worker cannot stop them
    /// (another uid's, or they would not die): the job is left to the daemon, still claimed
    /// and registered, with a lease about to run out, so that the daemon fences them (or
    /// dead-letters the job) before anyone runs it again.
    LeftRunning(String, Scope<'h>),
}

fn describe(st: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown status".into(),
    }
}

/// Runs the command for one job (in a cgroup of its own under `home`, if any), extending the
/// lease while it runs.
fn run_one<'h>(
    a: &WorkArgs,
    (registrar, home): (&Registrar<'_>, Option<&'h CgroupHome>),
    job: &Job<'_>,
    lease: Option<Duration>,
    stop: &Stop,
    spare: &mut Option<CommandCgroup<'h>>,
) -> Result<Ran<'h>> {
    let payload = job.payload()?;
    // The cgroup the worker's last command ended in, empty, if any: making and removing one
    // per command costs more than the command `true` itself.
    let cgroup = match home.map(|h| (h, spare.take().map_or_else(|| h.create(), Ok))) {
        None => None,
        Some((_, Ok(g))) => Some(g),
        Some((h, Err(e))) => {
            return Ok(Ran::Unfenced(format!(
                "cannot make a cgroup for it under {}: {e}",
                h.path().display()
            )))
        }
    };
    let (mut child, fence) = match start_registered(a, registrar, job, &payload, cgroup.as_ref())? {
        Started::Running(child, fence) => (child, fence),
        Started::Refused(why) => return Ok(Ran::Unfenced(why)),
    };
    let scope = Scope::new(&child, cgroup)?;
    let writer = feed_stdin(&mut child, payload);
    let (ran, reusable) = supervise(&mut child, scope, job, lease, stop)?;
    *spare = reusable;
    // Reaped (by try_wait or kill_group): the daemon may forget it, unless its group lives
    // on, which the daemon's fence must then stop.
    if matches!(ran, Ran::LeftRunning(..)) {
        fence.leave_to_daemon();
    } else {
        drop(fence);
    }
    if let Some(w) = writer {
        // The command has exited, so its end of the pipe is closed and the write is over.
        let _ = w.join();
    }
    Ok(ran)
}

/// Payloads up to this size are written to the command's stdin at once: an empty pipe takes
/// `PIPE_BUF` bytes in one write that never blocks, so no thread is needed.
const STDIN_AT_ONCE: usize = 4096;

/// Writes the payload to the command's stdin: at once when it fits an empty pipe, else from
/// its own thread (a command that does not read a payload larger than a pipe holds would
/// otherwise block us, with no heartbeat, until it exits).
fn feed_stdin(child: &mut Child, payload: Vec<u8>) -> Option<std::thread::JoinHandle<()>> {
    let mut stdin = child.stdin.take()?;
    if payload.len() <= STDIN_AT_ONCE {
        // A command that does not read its stdin closes the pipe: that is not an error.
        let _ = stdin.write_all(&payload);
        return None;
    }
    Some(std::thread::spawn(move || {
        let _ = stdin.write_all(&payload);
    }))
}

/// Waits for the command (and its process group and cgroup) to end, extending the lease
/// three times a lease and stopping the command on a second interrupt or a lost lease; with
/// its cgroup, if empty, for the worker's next command.
fn supervise<'h>(
    child: &mut Child,
    scope: Scope<'h>,
    job: &Job<'_>,
    lease: Option<Duration>,
    stop: &Stop,
) -> Result<(Ran<'h>, Option<CommandCgroup<'h>>)> {
    // Three beats a lease (`worker` refuses leases under WORK_MIN_LEASE; the loop's waits
    // end at the next beat, so they keep up).
    let beat = lease.map(|l| l / 3);
    let mut next_beat = beat.and_then(|b| Instant::now().checked_add(b));
    // Its exit wakes this thread at once (no descriptor left: the loop looks every 2 ms).
    let exited = crate::leftovers::exit_watch(child);
    let keep_lease = || {
        if let Some(l) = lease {
            let _ = job.extend_lease(l);
        }
    };
    loop {
        if has_exited(child)? {
            return Ok(match scope.stop_leftovers(child, keep_lease) {
                Ok(st) => (Ran::Exited(st), scope.into_reusable()),
                Err(e) => (Ran::LeftRunning(format!("{e:#}"), scope), None),
            });
        }
        if stop.now.load(Ordering::Relaxed) {
            scope.kill(child);
            return Ok(match scope.wait_empty(keep_lease) {
                Ok(()) => (Ran::Interrupted, scope.into_reusable()),
                Err(e) => (Ran::LeftRunning(format!("{e:#}"), scope), None),
            });
        }
        if let (Some(l), Some(nb)) = (lease, next_beat) {
            if Instant::now() >= nb {
                if let Err(e) = job.extend_lease(l) {
                    // The daemon re-queued the job (we stalled past the lease): another
                    // worker may run it now, so this run must not go on beside it.
                    scope.kill(child);
                    return Ok((Ran::Killed(format!("killed: {e}")), scope.into_reusable()));
                }
                next_beat = beat.and_then(|b| Instant::now().checked_add(b));
            }
        }
        let until_beat = next_beat.map(|nb| nb.saturating_duration_since(Instant::now()));
        crate::leftovers::wait_exit(exited.as_ref(), until_beat);
    }
}

/// A job whose command left processes this worker cannot stop: neither settled nor given
/// back while they run (either would let the job run beside them). Its lease ends now, so a
/// daemon that expires leases fences the group (or dead-letters the job) at its next scan;
/// this thread waits meanwhile, and fails the job itself once the group is empty (a daemon
/// with lease expiry off would otherwise never take it back). A stop of `work` leaves it
/// claimed: this process's exit hands it to the daemon's recovery, which fences first.
fn hand_to_daemon(job: Job<'_>, scope: &Scope<'_>, why: &str, stop: &Stop) {
    let _ = job.extend_lease(Duration::from_millis(1));
    while scope.has_live_members() {
        if stop.now.load(Ordering::Relaxed) {
            std::mem::forget(job);
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Already taken back by the daemon (its fence killed the group): nothing to settle.
    let _ = job.fail(why);
}

/// The shortest lease `work` can keep while a command runs: it extends it every third of the
/// lease, from a loop that looks every 2 ms, and the first extension waits on the command's
/// start and its fence registration.
const WORK_MIN_LEASE: Duration = Duration::from_millis(50);

/// The lease `work` keeps: `--lease`, else the queue's; refused when too short to keep.
fn work_lease(a: &WorkArgs, queue_lease_ms: u32) -> Result<Option<Duration>> {
    let queue_lease = Some(Duration::from_millis(queue_lease_ms.into())).filter(|d| !d.is_zero());
    let lease = a.lease.or(queue_lease);
    if let Some(l) = lease.filter(|l| *l < WORK_MIN_LEASE) {
        let whose = if a.lease.is_some() { "--lease" } else { "the queue's lease" };
        bail!(
            "{whose} of {l:?} is shorter than xtcq work can keep while a command runs (it extends \
             the lease every third of it): pass --lease {}ms or more",
            WORK_MIN_LEASE.as_millis()
        );
    }
    Ok(lease)
}

/// Gives a failed job back: at once, or after the queue's retry backoff for the attempt it
/// failed (its `attempts` counts the earlier failures).
fn fail(job: Job<'_>, why: &str, backoff: Option<RetryBackoff>) -> Result<(), xtcq_client::Error> {
    match backoff {
        None => job.fail(why),
        Some(b) => {
            let failures = job.attempts().saturating_add(1);
            let delay = b.delay(failures, jitter_bits(job.id()));
            job.fail_after(Some(why), delay)
        }
    }
}

/// 64 bits for the jitter, different per job and per moment (splitmix64 of the clock, the
/// pid and the job): spreading retries needs no cryptographic randomness.
fn jitter_bits(id: xtcq_client::JobId) -> u64 {
    let mut z = xtcq_client::monotonic_ns()
        ^ (std::process::id() as u64) << 32
        ^ ((id.index as u64) << 24 | id.birth as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Acks, gives back or fails (with the queue's retry backoff) a job by how its command
/// ended, counts it, and says so; `Err` when the worker must stop (a refused fence).
/// `attempt` is the job's attempt count read when it was claimed: the record's may have
/// moved on since (its lease ran out and the daemon re-queued it, counting an attempt).
fn settle(
    (a, c): (&WorkArgs, &Client),
    queue: &QueueInfo,
    n: &Counters,
    (job, attempt): (Job<'_>, u32),
    outcome: Result<Ran<'_>>,
) -> Result<()> {
    let id = job.id();
    // `unusual`: killed or not run, reported even without --verbose.
    let (what, succeeded, unusual) = match &outcome {
        Ok(Ran::Exited(st)) => (describe(st), st.success(), false),
        Ok(Ran::Killed(why)) => (why.clone(), false, true),
        Ok(Ran::Interrupted) => ("interrupted; given back, not counted as an attempt".into(), false, true),
        Ok(Ran::Unfenced(why)) => (format!("not run: {why}; given back"), false, true),
        Ok(Ran::LeftRunning(..)) => unreachable!("handled above"),
        Err(e) => (format!("not run: {e:#}"), false, true),
    };
    let backoff = queue.retry_backoff;
    let settled = match outcome {
        Ok(Ran::Exited(_)) if succeeded => job.ack(),
        Ok(Ran::Interrupted | Ran::Unfenced(_)) => job.release(),
        Ok(Ran::Exited(_) | Ran::Killed(_) | Ran::LeftRunning(..)) => fail(job, &what, backoff),
        Err(_) => fail(job, "cannot run", backoff),
    };
    // A job no longer ours whose record finished (or already holds another job) was
    // cancelled: the daemon stopped its command and freed it. One re-queued after its lease
    // ran out keeps its id and reads queued or running.
    let cancelled = settled.is_err()
        && c.job_state(&a.queue, id).is_ok_and(|s| {
            matches!(
                s,
                xtcq_proto::JobState::Cancelled
                    | xtcq_proto::JobState::Finished
                    | xtcq_proto::JobState::Unknown
            )
        });
    // Counted once settled: a job whose command succeeded but whose ack came too late
    // (its lease ran out and it was re-queued) did not succeed here.
    n.settled(
        id,
        match &outcome {
            _ if cancelled => Settled::Cancelled,
            _ if succeeded && settled.is_ok() => Settled::Ok,
            Ok(Ran::Interrupted | Ran::Unfenced(_)) => Settled::GivenBack,
            _ => work_summary::failed_outcome(attempt, queue.max_attempts),
        },
    );
    if cancelled {
        eprintln!(
            "xtcq: job {id} attempt {} of {}: cancelled; its command was stopped",
            attempt + 1,
            a.queue
        );
        return Ok(());
    }
    if a.verbose || unusual {
        eprintln!("xtcq: job {id} attempt {} of {}: {what}", attempt + 1, a.queue);
    }
    let settled_ok = settled.is_ok();
    if let Err(e) = settled {
        eprintln!("xtcq: job {id} attempt {} of {}: {e}", attempt + 1, a.queue);
    }
    // A refusal stops this worker, unless the job was not ours any more (its lease ran out
    // before the registration was answered; its command never started).
    if let (Ok(Ran::Unfenced(why)), true) = (&outcome, settled_ok) {
        bail!("job {id}: {why}");
    }
    Ok(())
}

/// The next job, waiting for one in steps (to see a stop), or `None` once told to stop or
/// idle past `--idle-exit`.
fn next_job<'t>(
    a: &WorkArgs,
    thief: &'t ThiefHandle,
    stop: &Stop,
    idle_since: Instant,
) -> Result<Option<Job<'t>>> {
    loop {
        if stop.taking.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if let Some(j) = thief.steal_wait(Some(Duration::from_millis(100)))? {
            return Ok(Some(j));
        }
        if a.idle_exit.is_some_and(|t| idle_since.elapsed() >= t) {
            return Ok(None);
        }
    }
}

pub(crate) fn worker(
    a: &WorkArgs,
    (c, home): (&Client, Option<&CgroupHome>),
    thief: ThiefHandle,
    stop: &Stop,
    n: &Counters,
) -> Result<()> {
    std::thread::scope(|s| {
        let registrar = Registrar::start(s, c)?;
        take_and_run(a, (c, &registrar, home), thief, stop, n)
    })
}

/// The worker thread's loop: takes a job, runs its command, settles it, until told to stop.
fn take_and_run(
    a: &WorkArgs,
    (c, registrar, home): (&Client, &Registrar<'_>, Option<&CgroupHome>),
    thief: ThiefHandle,
    stop: &Stop,
    n: &Counters,
) -> Result<()> {
    let lease = work_lease(a, thief.queue().lease_ms)?;
    let mut idle_since = Instant::now();
    let mut spare = None;
    while !stop.taking.load(Ordering::Relaxed) {
        if a.max_jobs != 0 && n.taken.fetch_add(1, Ordering::Relaxed) >= a.max_jobs {
            break;
        }
        let Some(job) = next_job(a, &thief, stop, idle_since)? else {
            // Not taken after all.
            if a.max_jobs != 0 {
                n.taken.fetch_sub(1, Ordering::Relaxed);
            }
            break;
        };
        if let Some(l) = a.lease {
            if let Err(e) = job.extend_lease(l) {
                // Not ours any more (its lease ran out between the steal and here): someone
                // else may run it; this worker goes on with the next job.
                eprintln!("xtcq: job {} of {}: not run: {e}", job.id(), a.queue);
                drop(job);
                continue;
            }
        }
        n.running.fetch_add(1, Ordering::Relaxed);
        let id = job.id();
        let attempt = job.attempts();
        let outcome = run_one(a, (registrar, home), &job, lease, stop, &mut spare);
        n.running.fetch_sub(1, Ordering::Relaxed);
        if let Ok(Ran::LeftRunning(why, scope)) = &outcome {
            eprintln!(
                "xtcq: job {id} attempt {} of {}: {why}; left to xtcqd to stop before the job runs again",
                attempt + 1,
                a.queue
            );
            hand_to_daemon(job, scope, &why.clone(), stop);
            n.settled(id, work_summary::failed_outcome(attempt, thief.queue().max_attempts));
            idle_since = Instant::now();
            continue;
        }
        settle((a, c), thief.queue(), n, (job, attempt), outcome)?;
        idle_since = Instant::now();
    }
    Ok(())
}

pub fn work(socket: Option<&Path>, mut a: WorkArgs) -> Result<i32> {
    if a.jobs == 0 || a.jobs > MAX_JOBS {
        bail!("--jobs must be between 1 and {MAX_JOBS}, not {}", a.jobs);
    }
    a.program = Some(crate::runnable::resolve(&a.cmd[0])?);
    a.environ = crate::spawn::environment_except(&crate::work_start::JOB_VARIABLES)
        .context("cannot read this process's environment for the commands")?;
    raise_fd_limit();
    check_jobs_fit(a.jobs)?;
    let home = fence_in_force();
    let stop = Arc::new(Stop::default());
    work_pool::stop_on_signals(&stop)?;
    let c = connect(socket)?;
    let thief = c.attach_thief(&a.queue)?;
    // Before any job is taken: a lease too short to keep would kill every command.
    work_lease(&a, thief.queue().lease_ms)?;
    let n = Counters::default();
    let t0 = Instant::now();
    let progress = std::io::stderr().is_terminal();
    let result = work_pool::run_workers(&a, (&c, home.as_ref()), &thief, &stop, &n, progress.then_some(t0));
    // On every way out, in a log as on a terminal (see work_summary).
    let status = work_summary::finish(&n, &a.queue, t0.elapsed(), progress);
    result?;
    Ok(status)
}

/// The cgroup the commands' cgroups go in, where this worker can make them; says on stderr
/// which fence is in force.
fn fence_in_force() -> Option<CgroupHome> {
    match CgroupHome::find() {
        Ok(home) => {
            eprintln!(
                "xtcq: fence: cgroup (each command in a cgroup of its own under {})",
                home.path().display()
            );
            Some(home)
        }
        Err(why) => {
            eprintln!(
                "xtcq: fence: process group ({why}; what leaves a command's process group is not \
                 stopped: run xtcq work as root or in a cgroup delegated to its user, e.g. \
                 `systemd-run --user --scope -p Delegate=yes xtcq work ...`)"
            );
            None
        }
    }
}
