//! The one-shot subcommands: `create`, `delete`, `ls`, `push`, `steal`, `dead`,
//! `check`, `shutdown`. Each connects, does its work, and returns an exit status (see `exit`).

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use xtcq_client::{Client, DeadAction, Due, Flavor, JobId, QueueParams};
use xtcq_proto::queue_name::escaped;

use crate::exit;
use crate::out::{self, outln, sayln};
use crate::parse_duration;
use crate::room::Room;

pub fn connect(socket: Option<&Path>) -> Result<Client> {
    Ok(Client::connect(socket)?)
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FlavorArg {
    /// Owners pop their newest job first (best cache locality).
    Lifo,
    /// Owners pop their oldest job first.
    Fifo,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Queue name (1 to 64 bytes, no whitespace).
    queue: String,
    /// Deques, i.e. owners (producers with their own deque) the queue can have at once
    /// [default: 4, or the segment's deques per queue if fewer].
    #[arg(long)]
    deques: Option<u32>,
    /// Slots per deque, a power of two; a full deque spills into the queue's overflow ring
    /// [default: 1024, or the segment's deque capacity if smaller].
    #[arg(long)]
    capacity: Option<u32>,
    /// The order in which owners pop their own deque.
    #[arg(long, value_enum, default_value = "lifo")]
    flavor: FlavorArg,
    /// Runs before a job is dead-lettered (0: retry forever).
    #[arg(long, default_value_t = 0)]
    max_attempts: u32,
    /// Claim lease: a job claimed longer than this is re-queued (0: none). E.g. 30s; whole
    /// milliseconds, at least 1ms.
    #[arg(long, value_parser = crate::parse_lease, default_value = "0")]
    lease: Duration,
    /// Priority levels, 1 to 8: `push --priority N` picks one (0 the most urgent), and
    /// consumers take from the most urgent non-empty level first. Each level has --deques
    /// deques of the segment's deques per queue.
    #[arg(long, default_value_t = 1)]
    levels: u32,
    /// Every N-th job a consumer takes comes from the least urgent non-empty level, so a
    /// busy urgent level does not starve the others (0: never).
    #[arg(long, value_name = "N", default_value_t = 0)]
    aging: u32,
    /// Succeed if a queue of that name already exists with these settings (flavor, deques,
    /// capacity, max attempts, lease, allowed users and groups); one with other settings, or
    /// one you may not use, is refused, naming why. The limits and retry backoff given are set
    /// on it as on a new one.
    #[arg(long)]
    exist_ok: bool,
    /// Let this user (name or uid) use the queue too: attach as a producer or consumer,
    /// re-queue and purge its dead letters (repeatable). The queue belongs to the user who
    /// creates it; only that user, root and xtcqd's own user may delete it.
    #[arg(long, value_name = "USER")]
    allow_uid: Vec<String>,
    /// Let the members of this group (name or gid) use the queue too (repeatable).
    #[arg(long, value_name = "GROUP")]
    allow_gid: Vec<String>,
    #[command(flatten)]
    backoff: crate::delay::BackoffArgs,
    #[command(flatten)]
    quota: crate::quota::QuotaArgs,
}

/// The segment's deques per queue and deque capacity: the most a queue may ask for.
/// The segment's deques per queue and deque capacity, read from its validated descriptor
/// (not from a whole-segment `stats`, whose answer outgrows a frame with hundreds of queues).
/// Only defaults are clamped to them: the daemon checks what `create` asks for.
fn segment_limits(client: &Client) -> Result<(u32, u32)> {
    let seg = client.segment()?;
    let c = seg.config();
    Ok((c.deques_per_queue, c.deque_capacity))
}

pub fn create(socket: Option<&Path>, args: CreateArgs) -> Result<i32> {
    let uids = args
        .allow_uid
        .iter()
        .map(|u| xtcq_proto::names::resolve_uid(u).context("--allow-uid"))
        .collect::<Result<Vec<_>>>()?;
    let gids = args
        .allow_gid
        .iter()
        .map(|g| xtcq_proto::names::resolve_gid(g).context("--allow-gid"))
        .collect::<Result<Vec<_>>>()?;
    let backoff = args.backoff.policy()?;
    let client = connect(socket)?;
    let lease_ms = xtcq_proto::lease::lease_ms(args.lease).context("--lease")?;
    let defaults = QueueParams::new(args.queue.clone());
    let (deques, capacity) = match (args.deques, args.capacity) {
        (Some(d), Some(c)) => (d, c),
        (deques, capacity) => {
            let (max_deques, max_capacity) = segment_limits(&client)?;
            // Every level has the queue's deques: the default leaves room for all of them.
            let per_level = (max_deques / args.levels.max(1)).max(1);
            (
                deques.unwrap_or(defaults.deques.min(per_level)),
                capacity.unwrap_or(defaults.capacity.min(max_capacity)),
            )
        }
    };
    let p = QueueParams {
        name: args.queue.clone(),
        deques,
        capacity,
        flavor: match args.flavor {
            FlavorArg::Lifo => Flavor::Lifo,
            FlavorArg::Fifo => Flavor::Fifo,
        },
        max_attempts: args.max_attempts,
        lease_ms,
        levels: args.levels,
        aging: args.aging,
    };
    args.quota.check(&client)?;
    // With --exist-ok the daemon compares the settings and refuses other ones; the limits and
    // backoff below are then set again to what was asked, which changes nothing on a rerun.
    let options = xtcq_client::CreateOptions { exist_ok: args.exist_ok, allow_uids: uids, allow_gids: gids };
    client.create_queue_with(&p, &options)?;
    args.quota.apply(&client, &args.queue)?;
    if let Some(b) = backoff {
        client.set_retry_backoff(&args.queue, Some(b)).with_context(|| {
            format!("queue {} was created, but its retry backoff could not be set", escaped(&args.queue))
        })?;
    }
    Ok(exit::OK)
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// Queue name.
    queue: String,
    /// Drop the queue's queued jobs and dead letters instead of refusing to delete a queue
    /// that holds some. A queue with an attached process, or with a job being run, is never
    /// deleted.
    #[arg(long)]
    force: bool,
}

pub fn delete(socket: Option<&Path>, args: DeleteArgs) -> Result<i32> {
    let d = connect(socket)?.delete_queue(&args.queue, args.force)?;
    if d.dropped_queued > 0 || d.dropped_dead > 0 {
        eprintln!(
            "xtcq: deleted queue {}, dropping {} queued job(s) and {} dead letter(s)",
            escaped(&d.queue.name),
            d.dropped_queued,
            d.dropped_dead
        );
    }
    Ok(exit::OK)
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) fn lease_or_dash(v: u32) -> String {
    if v == 0 {
        "-".into()
    } else {
        humantime::format_duration(Duration::from_millis(v as u64)).to_string()
    }
}

pub fn ls(socket: Option<&Path>, args: LsArgs) -> Result<i32> {
    let client = connect(socket)?;
    let stats = client.stats(None)?;
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&stats.queues.iter().map(|q| &q.info).collect::<Vec<_>>())?
        );
        return Ok(exit::OK);
    }
    let mut out = String::from(
        "QUEUE                FLAVOR  DEQUES  CAPACITY  MAX-ATTEMPTS  LEASE   QUEUED  RUNNING  DEAD  DELAYED  STATE   RETRY-BACKOFF\n",
    );
    for q in &stats.queues {
        let i = &q.info;
        out.push_str(&format!(
            "{:<20} {:<7} {:>6} {:>9} {:>13}  {:<7} {:>6} {:>8} {:>5} {:>8}  {:<6}  {}\n",
            escaped(&i.name),
            i.flavor.name(),
            i.deques,
            i.capacity,
            if i.max_attempts == 0 { "-".to_string() } else { i.max_attempts.to_string() },
            lease_or_dash(i.lease_ms),
            q.records.queued,
            q.records.claimed,
            q.records.dead,
            q.records.delayed,
            if i.paused { "paused" } else { "active" },
            crate::delay::backoff_label(i.retry_backoff.as_ref())
        ));
    }
    out::print(&out)?;
    Ok(exit::OK)
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The queue.
    queue: String,
    /// Payloads, one job each; none (or `-`): one job per line of stdin.
    payload: Vec<String>,
    /// Jobs on stdin are separated by NUL bytes instead of newlines (for `find -print0`).
    #[arg(short = '0', long)]
    null: bool,
    /// How long to wait for room when the queue is full before giving up.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    timeout: Duration,
    /// Print each job's id (`record.generation`, the id `work` and `dead` name it by) on stdout.
    #[arg(long)]
    print_handle: bool,
    /// Hold the jobs back this long: no consumer sees them before (e.g. 5s, 2m).
    #[arg(long, value_parser = parse_duration, conflicts_with = "at")]
    delay: Option<Duration>,
    /// Hold the jobs back until this time: RFC 3339 (2030-01-02T03:04:05Z,
    /// 2030-01-02T05:04:05+02:00) or @UNIX_SECONDS. A time past is due at once.
    #[arg(long, value_parser = crate::delay::parse_at)]
    at: Option<std::time::SystemTime>,
    /// The jobs' priority: 0 (the most urgent, the default) to the queue's --levels minus 1.
    #[arg(long, default_value_t = 0)]
    priority: u32,
    /// Add the jobs to this batch (opened with `xtcq batch open`, not yet sealed).
    #[arg(long, value_name = "NAME")]
    batch: Option<String>,
    /// A unique job: refused (exit 6, naming the job) while a job of the queue pushed with
    /// this key (1 to 64 bytes) is queued, delayed or running. One payload; prints
    /// `new ID` on stdout.
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
    /// With --key: when a live job holds the key, push nothing and print `existing ID`
    /// (exit 0).
    #[arg(long, requires = "key")]
    or_existing: bool,
}

/// Calls `f` with each job of stdin: a line (without its newline) or a NUL-separated record.
/// A job longer than `max` bytes (the largest payload the segment takes) is refused as soon
/// as `max + 1` of its bytes are in, so an endless line (`xtcq push q < /dev/zero`) is an
/// error, not a buffer that grows until memory runs out.
pub fn for_each_stdin_job(null: bool, max: u32, mut f: impl FnMut(&[u8]) -> Result<()>) -> Result<u64> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let sep = if null { 0u8 } else { b'\n' };
    let mut buf = Vec::new();
    let mut n = 0u64;
    // The largest payload, one byte past it (to tell "too large") and the separator.
    let limit = u64::from(max) + 2;
    loop {
        buf.clear();
        let got = (&mut input).take(limit).read_until(sep, &mut buf).context("cannot read stdin")?;
        if got == 0 {
            return Ok(n);
        }
        if buf.last() == Some(&sep) {
            buf.pop();
        } else if buf.len() > max as usize {
            bail!(
                "payload too large: job {} of stdin is longer than {max} bytes, the largest payload \
                 this segment takes (xtcqd --payload-bytes); {n} job(s) pushed, the rest not read",
                n + 1
            );
        }
        f(&buf).with_context(|| format!("job {} of stdin", n + 1))?;
        n += 1;
    }
}

pub fn push(socket: Option<&Path>, args: PushArgs) -> Result<i32> {
    if let Some(key) = &args.key {
        let due = args.delay.map(Due::In).or(args.at.map(Due::At));
        let push = crate::unique::KeyedPush {
            queue: &args.queue,
            key,
            payload: &args.payload,
            or_existing: args.or_existing,
            timeout: args.timeout,
            due,
            priority: args.priority,
            batch: args.batch.as_deref(),
        };
        return crate::unique::push(socket, push);
    }
    let client = connect(socket)?;
    let inj = client.attach_injector(&args.queue)?;
    if let Some(name) = &args.batch {
        inj.set_batch(Some(&client.batch_progress(&args.queue, name)?));
    }
    let mut pushed = 0u64;
    let mut room = Room::new(&args.queue, args.timeout);
    let due = args.delay.map(Due::In).or(args.at.map(Due::At));
    let mut one = |p: &[u8]| -> Result<()> {
        let h = match due {
            None => room.push(|p| inj.push_priority(p, args.priority), p)?,
            Some(due) => room.push(|p| inj.push_delayed_priority(p, due, args.priority), p)?,
        };
        pushed += 1;
        if args.print_handle {
            // Not the quiet stop of a listing: the jobs not yet pushed would be dropped
            // unsaid, so a closed stdout is an error that says how far it got.
            if let Err(e) = out::print(format!("{}\n", xtcq_client::JobId::of_push(h))) {
                bail!("cannot print the id of job {pushed} (it was pushed; the rest were not): {e:#}");
            }
        }
        Ok(())
    };
    if args.payload.is_empty() || args.payload == ["-"] {
        for_each_stdin_job(args.null, inj.payload_capacity(), one)?;
    } else {
        for p in &args.payload {
            one(p.as_bytes())?;
        }
    }
    Ok(exit::OK)
}

#[derive(Debug, Args)]
pub struct StealArgs {
    /// The queue.
    queue: String,
    /// Wait for jobs when the queue is empty (for at most --timeout, if given).
    #[arg(long)]
    wait: bool,
    /// With --wait: give up after this long in all (implies --wait). E.g. 5s.
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Jobs to take; 0 takes every job there is.
    #[arg(long, short = 'n', default_value_t = 1)]
    count: u64,
    /// Jobs on stdout are separated by NUL bytes instead of newlines.
    #[arg(short = '0', long)]
    null: bool,
}

pub fn steal(socket: Option<&Path>, args: StealArgs) -> Result<i32> {
    let client = connect(socket)?;
    let thief = client.attach_thief(&args.queue)?;
    let wait = args.wait || args.timeout.is_some();
    // None: no limit (a timeout too long to add to the clock is as good as none).
    let deadline = args.timeout.and_then(|t| Instant::now().checked_add(t));
    let sep: &[u8] = if args.null { b"\0" } else { b"\n" };
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut buf = Vec::new();
    let mut taken = 0u64;
    while args.count == 0 || taken < args.count {
        let job = if wait && !(args.count == 0 && taken > 0) {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            thief.steal_wait(left)?
        } else {
            thief.steal()?
        };
        let Some(job) = job else { break };
        buf.clear();
        job.read_payload(&mut buf)?;
        buf.extend_from_slice(sep);
        // Ack only once the payload is out: a job whose output failed (a closed pipe) is
        // given back to the queue, not lost.
        if let Err(e) = out.write_all(&buf).and_then(|_| out.flush()) {
            // Given back without counting an attempt: the job was not run, and a reader
            // that closes the pipe (`| head -1`) must not push jobs toward the dead letters.
            job.release()?;
            if e.kind() == std::io::ErrorKind::BrokenPipe && taken > 0 {
                // The reader had enough (`| head -1`): not an error.
                return Ok(exit::OK);
            }
            return Err(anyhow::Error::from(e).context("cannot write the job to stdout; it was re-queued"));
        }
        let id = job.id();
        // Written, but not ours any more (the lease ran out while stdout was slow): the job
        // will be delivered again, and whoever reads our output must know this copy was
        // not the one that counted.
        job.ack().with_context(|| {
            format!("job {id} was written to stdout, but the queue will deliver it again")
        })?;
        taken += 1;
    }
    Ok(if taken == 0 { exit::EMPTY } else { exit::OK })
}

#[derive(Debug, Args)]
pub struct DeadArgs {
    /// The queue.
    queue: String,
    /// Put these dead letters back on the queue (all of them when none is named).
    #[arg(long, conflicts_with = "purge")]
    requeue: bool,
    /// Delete these dead letters (all of them when none is named).
    #[arg(long)]
    purge: bool,
    /// Jobs to act on, by the id `xtcq dead QUEUE` lists (the id `push --print-handle`,
    /// `$XTCQ_JOB` and `work` print); a record.generation handle is accepted too.
    #[arg(value_parser = parse_job_id)]
    jobs: Vec<JobId>,
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_job_id(s: &str) -> Result<JobId, String> {
    s.parse().map_err(|_| format!("{s:?} is not a job id; say it as `xtcq dead QUEUE` lists it (like 12.3)"))
}

pub fn dead(socket: Option<&Path>, args: DeadArgs) -> Result<i32> {
    let client = connect(socket)?;
    if args.requeue || args.purge {
        return act_on_dead(&client, &args);
    }
    if !args.jobs.is_empty() {
        bail!("naming jobs needs --requeue or --purge");
    }
    let list = client.dead_letters(&args.queue)?;
    if args.json {
        print_dead_json(&list)?;
    } else {
        print_dead_table(&list)?;
    }
    Ok(if list.is_empty() { exit::EMPTY } else { exit::OK })
}

fn print_dead_json(list: &[xtcq_client::DeadLetter]) -> Result<()> {
    let v: Vec<_> = list
        .iter()
        .map(|d| {
            serde_json::json!({
                "job": d.handle.to_string(),
                "id": d.id.to_string(),
                "attempts": d.attempts,
                "last_error": d.last_error,
                "payload": String::from_utf8_lossy(&d.payload),
            })
        })
        .collect();
    outln!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

fn print_dead_table(list: &[xtcq_client::DeadLetter]) -> Result<()> {
    let mut text = String::from("JOB           ATTEMPTS  LAST-ERROR                PAYLOAD\n");
    for d in list {
        let p = String::from_utf8_lossy(&d.payload);
        let p: String = p.chars().take(60).map(|c| if c.is_control() { '.' } else { c }).collect();
        text.push_str(&format!(
            "{:<13} {:>8}  {:<25} {}\n",
            d.id.to_string(),
            d.attempts,
            escaped(&d.last_error),
            p
        ));
    }
    out::print(&text)
}

/// `dead --requeue` / `--purge`: requests to the daemon, which owns the dead letters (every
/// one of the queue's in one request when none is named).
fn act_on_dead(client: &Client, args: &DeadArgs) -> Result<i32> {
    let (action, verb) =
        if args.requeue { (DeadAction::Requeue, "re-queued") } else { (DeadAction::Purge, "purged") };
    // Named by id (what every other command prints) or by the current handle: the daemon
    // resolves either.
    let named = &args.jobs;
    let mut shown = crate::progress::Progress::new();
    let total = named.len();
    let done = client.act_on_dead(&args.queue, (!named.is_empty()).then_some(&named[..]), action, |n| {
        if total > 0 {
            shown.say(|| format!("xtcq: {verb} {n} of {total} dead letter(s) of {}", escaped(&args.queue)))
        }
    });
    shown.clear();
    let done = done?;
    if done.done == 0 && done.gone == 0 {
        eprintln!("xtcq: queue {} has no dead letters", args.queue);
        return Ok(exit::EMPTY);
    }
    let gone = if done.gone > 0 {
        format!(" ({} were re-queued or purged by another process meanwhile)", done.gone)
    } else {
        String::new()
    };
    eprintln!("xtcq: {verb} {} dead letter(s) of {}{gone}", done.done, escaped(&args.queue));
    Ok(exit::OK)
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Check this segment file directly, without asking a daemon (e.g. one left behind by a
    /// daemon that is not running).
    #[arg(long, value_name = "PATH")]
    segment: Option<PathBuf>,
    /// Also require that no job is being pushed or run and every queued job is indexed
    /// (true only when no process is attached).
    #[arg(long)]
    quiescent: bool,
    /// A queued job that no deque or overflow ring references for this long is reported
    /// (no consumer would find it; the daemon indexes such strays within two of its
    /// --lease-scan-interval sweeps after the queue last moved, 100 ms each by default, and
    /// at the latest within its 10 s walk of every record).
    #[arg(long, value_parser = parse_duration, default_value = "500ms")]
    stray_window: Duration,
}

pub fn check(socket: Option<&Path>, args: CheckArgs) -> Result<i32> {
    let report = match &args.segment {
        Some(p) => xtcq_client::Client::check_segment_file_with_strays(p, args.quiescent, args.stray_window)
            .map_err(|e| anyhow::anyhow!("segment {} is not a valid xtcq segment: {e}", p.display()))?,
        None => connect(socket)?.check_with_strays(args.quiescent, args.stray_window)?,
    };
    let n = &report.counts;
    sayln!(
        "{} queue(s), {} deque(s) holding {} handle(s), {} overflow index(es), {} process(es)",
        n.queues,
        n.deques,
        n.deque_handles,
        n.ring_indices,
        n.processes
    );
    sayln!(
        "records: {} free, {} filling, {} queued, {} running, {} dead, {} delayed",
        n.free,
        n.filling,
        n.queued,
        n.claimed,
        n.dead,
        n.delayed
    );
    sayln!("payload blocks: {} held of {}", n.blocks.held, n.blocks.total);
    if report.is_consistent() {
        sayln!("consistent");
        Ok(exit::OK)
    } else {
        for p in &report.problems {
            sayln!("problem: {p}");
        }
        sayln!("INCONSISTENT: {} problem(s)", report.problems.len());
        Ok(exit::FAILED)
    }
}

pub fn shutdown(socket: Option<&Path>) -> Result<i32> {
    connect(socket)?.shutdown_daemon()?;
    Ok(exit::OK)
}
