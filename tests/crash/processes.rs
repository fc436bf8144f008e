//! Crashes across real processes, with the real `xtcqd` doing the recovery.
//!
//! - For every fail point of `xtcq_shm::failpoint::POINTS`: a workload of producer and
//!   consumer processes (this test binary re-run in a role, see [`child_main`]) attached
//!   through the daemon; one of them is killed (`SIGKILL` to itself) at that point; the daemon
//!   learns of the death through its pidfd and gives back what it held; the queue is drained;
//!   every job id acked exactly once, every job whose claimer died re-run (counted), the
//!   segment consistent (`check_segment`). For `daemon.recovery.mid` it is the daemon that
//!   dies half-way through a recovery, and a restarted daemon finishes it.
//! - Job leases: a live consumer that hangs with a claimed job loses it when its lease
//!   expires; another consumer re-runs it; the late ack fails with "lease expired".
//!
//! Each child logs what it did to a file, one unbuffered line per completed step (`T id`
//! trying to push, `P id` pushed, `R id attempts` running, `A id` acked, `N id` nacked), so
//! the parent knows what happened before the crash. Every wait has a deadline that fails
//! the test.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use xtcq_client::{Client, Error, Flavor, QueueParams};
use xtcq_shm::JobError;
use xtcq_testkit::*;

const QUEUE: &str = "crash";
const RECORDS: u64 = 16384;
/// Most jobs a consumer claims at once.
const BATCH: usize = 4;

/// An append-only log written with one `write(2)` per line: a line is either wholly in the
/// file or not at all when the process is killed.
struct Log(std::fs::File);

impl Log {
    fn open() -> Log {
        let p = std::env::var("XTCQ_TEST_LOG").expect("XTCQ_TEST_LOG");
        Log(std::fs::OpenOptions::new().create(true).append(true).open(p).expect("log file"))
    }
    fn line(&mut self, s: std::fmt::Arguments<'_>) {
        self.0.write_all(format!("{s}\n").as_bytes()).expect("log write");
    }
}

/// The entry point of child processes; an ordinary (empty) test when `XTCQ_TEST_ROLE` is
/// unset.
#[test]
fn child_main() {
    child_entry(run_role);
}

fn parse_id(p: &[u8]) -> Result<u64, Error> {
    String::from_utf8_lossy(p).parse().map_err(|_| Error::Corrupt(format!("bad payload {p:?}")))
}

fn push_retrying(
    mut push: impl FnMut(&[u8]) -> Result<xtcq_client::JobHandle, Error>,
    p: &[u8],
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match push(p) {
            Ok(_) => return Ok(()),
            Err(Error::QueueFull { .. } | Error::RecordsFull(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(200))
            }
            Err(e) => return Err(e),
        }
    }
}

fn run_role(role: &str) -> Result<(), Error> {
    let n: u64 = env_or("XTCQ_TEST_N", 100);
    let base: u64 = env_or("XTCQ_TEST_BASE", 0);
    let c = Client::connect(None)?;
    match role {
        "producer" => producer(&c, base..base + n),
        // Injector: every push goes to the overflow ring.
        "injector" => {
            let mut log = Log::open();
            let inj = c.attach_injector(QUEUE)?;
            for id in base..base + n {
                log.line(format_args!("T {id}"));
                push_retrying(|p| inj.push(p), id.to_string().as_bytes())?;
                log.line(format_args!("P {id}"));
            }
            Ok(())
        }
        "consumer" => consumer(&c),
        "hang" => hang(&c),
        other => Err(Error::Corrupt(format!("unknown role {other}"))),
    }
}

/// Owner: pushes `ids`; with XTCQ_TEST_POP, then pops (LIFO) and acks them all.
fn producer(c: &Client, ids: std::ops::Range<u64>) -> Result<(), Error> {
    let mut log = Log::open();
    let owner = c.attach_owner(QUEUE)?;
    for id in ids {
        log.line(format_args!("T {id}"));
        push_retrying(|p| owner.push(p), id.to_string().as_bytes())?;
        log.line(format_args!("P {id}"));
    }
    if std::env::var_os("XTCQ_TEST_POP").is_some() {
        while let Some(j) = owner.pop()? {
            let id = parse_id(&j.payload()?)?;
            log.line(format_args!("R {id} {}", j.attempts()));
            j.ack()?;
            log.line(format_args!("A {id}"));
        }
    }
    if std::env::var_os("XTCQ_TEST_HOLD").is_some() {
        out("pushed");
        hold();
    }
    Ok(())
}

/// Thief: steals (single steals and batches in turn), runs, acks — or, with XTCQ_TEST_NACK,
/// nacks every third job on its first attempt. Stops when nothing comes for 1 s.
/// With XTCQ_TEST_DIE_HOLDING: claims three jobs, logs them and exits without acking.
fn consumer(c: &Client) -> Result<(), Error> {
    let mut log = Log::open();
    let thief = c.attach_thief(QUEUE)?;
    if std::env::var_os("XTCQ_TEST_DIE_HOLDING").is_some() {
        die_holding_three(&thief, &mut log)?;
    }
    let nack = std::env::var_os("XTCQ_TEST_NACK").is_some();
    // XTCQ_TEST_ACK_ALL: batch rounds run a `JobBatch`, settled with `ack_all`.
    let ack_all = std::env::var_os("XTCQ_TEST_ACK_ALL").is_some();
    let mut batch = xtcq_client::JobBatch::new();
    for round in 1u64.. {
        if round.is_multiple_of(2) && ack_all {
            batch_round(&thief, &mut batch, &mut log)?;
            continue;
        }
        let jobs = if round.is_multiple_of(2) {
            thief.steal_batch(BATCH)?
        } else {
            thief.steal_wait(Some(Duration::from_secs(1)))?.into_iter().collect()
        };
        if jobs.is_empty() && !round.is_multiple_of(2) {
            return Ok(());
        }
        for j in jobs {
            let id = parse_id(&j.payload()?)?;
            let attempts = j.attempts();
            log.line(format_args!("R {id} {attempts}"));
            if nack && attempts == 0 && id % 3 == 0 {
                j.nack()?;
                log.line(format_args!("N {id}"));
            } else {
                j.ack()?;
                log.line(format_args!("A {id}"));
            }
        }
    }
    Ok(())
}

/// Claims three jobs, logs them, and exits at once without acking them.
fn die_holding_three(thief: &xtcq_client::ThiefHandle, log: &mut Log) -> Result<(), Error> {
    let mut held = Vec::new();
    while held.len() < 3 {
        let j = thief.steal_wait(Some(Duration::from_secs(5)))?.ok_or(Error::Corrupt("no job".into()))?;
        log.line(format_args!("R {} {}", parse_id(&j.payload()?)?, j.attempts()));
        held.push(j);
    }
    // SAFETY: _exit(2) ends the process at once, with the claimed jobs neither acked nor
    // nacked, as after a crash.
    unsafe { libc::_exit(0) }
}

/// One `steal_into` round settled with `ack_all` (no nacks in this mode).
fn batch_round<'t>(
    thief: &'t xtcq_client::ThiefHandle,
    batch: &mut xtcq_client::JobBatch<'t>,
    log: &mut Log,
) -> Result<(), Error> {
    thief.steal_into(BATCH, batch)?;
    let ids = (0..batch.len()).map(|i| parse_id(&batch.payload(i)?)).collect::<Result<Vec<_>, _>>()?;
    for (i, id) in ids.iter().enumerate() {
        log.line(format_args!("R {id} {}", batch.attempts(i).unwrap_or(0)));
    }
    // `ack_batch.mid` dies right after ack_all's first ack, so that one is logged before it:
    // the log stays true at that death.
    ids.iter().take(1).for_each(|id| log.line(format_args!("A {id}")));
    batch.ack_all()?;
    ids.iter().skip(1).for_each(|id| log.line(format_args!("A {id}")));
    Ok(())
}

/// Claims one job, says so, hangs until stdin closes, then tries to ack it.
fn hang(c: &Client) -> Result<(), Error> {
    let thief = c.attach_thief(QUEUE)?;
    let j = thief.steal_wait(Some(Duration::from_secs(10)))?.ok_or(Error::Corrupt("no job".into()))?;
    out(format_args!(
        "claimed {} deadline {}",
        String::from_utf8_lossy(&j.payload()?),
        j.lease_deadline_ns().unwrap_or(0)
    ));
    hold();
    match j.ack() {
        Ok(()) => out("ack ok"),
        Err(Error::Job(JobError::LeaseExpired { .. })) => out("ack lease-expired"),
        Err(e) => out(format_args!("ack other-error {e}")),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The parent side.

fn create_queue(c: &Client, deques: u32, capacity: u32, flavor: Flavor, lease_ms: u32) {
    c.create_queue(&QueueParams {
        name: QUEUE.into(),
        deques,
        capacity,
        flavor,
        max_attempts: 0,
        lease_ms,
        levels: 1,
        aging: 0,
    })
    .expect("create queue");
}

/// Environment of a child role.
fn role_env(log: &Path, n: u64, base: u64, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("XTCQ_TEST_LOG", log.display().to_string()),
        ("XTCQ_TEST_N", n.to_string()),
        ("XTCQ_TEST_BASE", base.to_string()),
    ];
    v.extend(extra.iter().map(|(k, val)| (*k, val.to_string())));
    v
}

/// Runs role `role` to a clean exit.
fn run_clean(d: &Daemon, role: &str, log: &Path, n: u64, base: u64, extra: &[(&'static str, &str)]) {
    let mut r = spawn_role(module_path!(), role, &d.socket, &role_env(log, n, base, extra));
    let _ = r.finish(Duration::from_secs(20));
}

/// Runs role `role` with fail point `point` armed at its `nth` hit (`fail = (point, nth)`);
/// asserts that it died there (killed by the fail point, not a clean exit or an error).
/// Returns its pid.
fn run_dying(
    d: &Daemon,
    role: &str,
    log: &Path,
    (n, base): (u64, u64),
    (point, nth): (&str, u32),
    extra: &[(&'static str, &str)],
) -> u32 {
    let fp = format!("{point}=kill@{nth}");
    let mut env = extra.to_vec();
    env.push(("XTCQ_FAILPOINTS", &fp));
    let mut r = spawn_role(module_path!(), role, &d.socket, &role_env(log, n, base, &env));
    let pid = r.pid();
    let st = r.wait_dead(Duration::from_secs(20));
    assert_eq!(
        st.signal(),
        Some(libc::SIGKILL),
        "the {role} should have been killed at fail point {point} (hit {nth}), but it ended with {st:?}; \
         its log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    pid
}

/// What the child logs say.
#[derive(Default, Debug)]
struct Logs {
    tried: BTreeSet<u64>,
    pushed: BTreeSet<u64>,
    /// Ids acked by children.
    acked: Vec<u64>,
    nacked: BTreeSet<u64>,
    /// Ids a process that died was running (logged `R`, then neither `A` nor `N`).
    died_holding: BTreeSet<u64>,
}

fn read_logs(logs: &[(PathBuf, bool)]) -> Logs {
    let mut l = Logs::default();
    for (path, died) in logs {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut running = BTreeSet::new();
        for line in text.lines() {
            let mut f = line.split(' ');
            let (Some(k), Some(id)) = (f.next(), f.next().and_then(|v| v.parse::<u64>().ok())) else {
                panic!("bad log line {line:?} in {}", path.display())
            };
            match k {
                "T" => {
                    l.tried.insert(id);
                }
                "P" => {
                    l.pushed.insert(id);
                }
                "R" => {
                    running.insert(id);
                }
                "A" => {
                    running.remove(&id);
                    l.acked.push(id);
                }
                "N" => {
                    running.remove(&id);
                    l.nacked.insert(id);
                }
                _ => panic!("bad log line {line:?}"),
            }
        }
        if *died {
            l.died_holding.extend(running);
        } else {
            assert!(running.is_empty(), "a process that exited cleanly left jobs running: {running:?}");
        }
    }
    l
}

/// Waits until the daemon has recovered every child (no process slot but ours).
fn wait_children_recovered(d: &Daemon, c: &Client) {
    let me = std::process::id();
    eventually(Duration::from_secs(10), || {
        let s = c.stats(Some(QUEUE)).ok()?;
        s.processes.iter().all(|p| p.pid == me).then_some(())
    })
    .unwrap_or_else(|| panic!("children not recovered within 10 s; daemon log:\n{}", d.log_text()));
}

/// Jobs run again because the process that had claimed them died.
#[derive(Debug, PartialEq, Eq)]
struct Reruns {
    /// The dead process had logged running them.
    ran: usize,
    /// It had claimed them (one steal of a batch, or a claim whose payload it had not read
    /// yet) but not yet logged them.
    claimed: usize,
}

/// Drains the queue from this process and checks the accounting: every id pushed acked
/// exactly once; every job a dead process was running re-run; the segment consistent.
/// `max_claimed` bounds the jobs a dead consumer had claimed without logging them (its
/// batch size, or 0 when no consumer died).
fn drain_and_check(d: &Daemon, logs: &[(PathBuf, bool)], max_claimed: usize) -> Reruns {
    let c = d.client();
    wait_children_recovered(d, &c);
    let thief = c.attach_thief(QUEUE).expect("attach thief");
    let mut mine: Vec<(u64, u32)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(
            Instant::now() < deadline,
            "queue not drained within 10 s (wedged?); daemon log:\n{}",
            d.log_text()
        );
        match thief.steal_wait(Some(Duration::from_millis(100))).expect("steal") {
            Some(j) => {
                let id = parse_id(&j.payload().unwrap()).unwrap();
                mine.push((id, j.attempts()));
                j.ack().expect("ack");
            }
            None => {
                let s = c.stats(Some(QUEUE)).expect("stats");
                let r = &s.records;
                if r.queued == 0 && r.claimed == 0 && r.filling == 0 {
                    break;
                }
            }
        }
    }
    let l = read_logs(logs);
    let mut acks: BTreeMap<u64, u32> = BTreeMap::new();
    for id in l.acked.iter().copied().chain(mine.iter().map(|(id, _)| *id)) {
        *acks.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = acks.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs acked more than once: {twice:?}");
    let lost: Vec<_> = l.pushed.iter().filter(|id| !acks.contains_key(id)).collect();
    assert!(lost.is_empty(), "pushed jobs never acked (lost): {lost:?}");
    let invented: Vec<_> = acks.keys().filter(|id| !l.tried.contains(id)).collect();
    assert!(invented.is_empty(), "acked jobs nobody pushed: {invented:?}");
    // A push that died half-way either never happened or did: at most one per dead producer.
    let unlogged: Vec<_> = acks.keys().filter(|id| !l.pushed.contains(id)).collect();
    assert!(unlogged.len() <= 1, "jobs acked whose push never returned: {unlogged:?}");
    // Every job a dead consumer was running was re-run, with the lost attempt counted.
    for id in &l.died_holding {
        assert_eq!(acks.get(id), Some(&1), "job {id}, held by the dead process, was not re-run");
    }
    let rerun_here: BTreeSet<u64> = mine.iter().filter(|(_, a)| *a > 0).map(|(id, _)| *id).collect();
    for id in &l.died_holding {
        assert!(
            rerun_here.contains(id),
            "job {id}, held by the dead process, came back without an attempt more"
        );
    }
    // A job given back without a reason (neither nacked nor held by the dead) is a bug;
    // jobs the dead consumer had claimed but not logged yet are bounded by its batch.
    let claimed: Vec<_> =
        rerun_here.iter().filter(|id| !l.died_holding.contains(id) && !l.nacked.contains(id)).collect();
    assert!(
        claimed.len() <= max_claimed,
        "jobs came back with an attempt more that no dead process held and nobody nacked: {claimed:?}"
    );
    drop(thief);
    let s = c.stats(None).expect("stats");
    assert_eq!(s.records.free, RECORDS, "every record free after the drain: {:?}", s.records);
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach segment");
    let report = xtcq_shm::check::check_segment(&seg, true);
    assert!(report.is_consistent(), "check_segment: {:#?}", report.problems);
    let r = Reruns { ran: l.died_holding.len(), claimed: claimed.len() };
    eprintln!(
        "drained: {} acked ({} by children, {} here), {} pushed, {} nacked, re-runs: {r:?}",
        acks.len(),
        l.acked.len(),
        mine.len(),
        l.pushed.len(),
        l.nacked.len(),
    );
    r
}

fn logs_in(d: &Daemon, names: &[&str]) -> Vec<PathBuf> {
    names.iter().map(|n| d.dir().join(format!("{n}.log"))).collect()
}

/// A producer (owner or injector) dies at `point`; a clean producer pushes more; drain.
fn producer_dies(point: &str, role: &str, capacity: u32, nth: u32) {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    create_queue(&c, 2, capacity, Flavor::Lifo, 0);
    let l = logs_in(&d, &["dying", "clean"]);
    let pid = run_dying(&d, role, &l[0], (200, 0), (point, nth), &[]);
    run_clean(&d, "producer", &l[1], 200, 1000, &[]);
    let reruns = drain_and_check(&d, &[(l[0].clone(), true), (l[1].clone(), false)], 0);
    assert_eq!(reruns, Reruns { ran: 0, claimed: 0 });
    assert!(d.log_text().contains(&format!("pid={pid}")), "the daemon logged the recovery of {pid}");
}

/// A clean producer pushes 300 jobs and exits; a consumer dies at `point`; drain. Returns the
/// re-runs.
fn consumer_dies(point: &str, capacity: u32, nth: u32, extra: &[(&'static str, &str)]) -> Reruns {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    create_queue(&c, 2, capacity, Flavor::Lifo, 0);
    let l = logs_in(&d, &["producer", "dying"]);
    run_clean(&d, "producer", &l[0], 300, 0, &[]);
    run_dying(&d, "consumer", &l[1], (0, 0), (point, nth), extra);
    drain_and_check(&d, &[(l[0].clone(), false), (l[1].clone(), true)], BATCH)
}

#[test]
fn a_fail_point_test_exists_for_every_fail_point() {
    let covered = [
        "alloc.after_begin_fill",
        "publish.before_index",
        "push.after_slot_write",
        "pop.after_bottom_decrement",
        "steal.after_cas",
        "steal_batch.after_cas",
        "claim.after_cas",
        "overflow.push.after_cell",
        "overflow.pop.after_cell",
        "ack.before_cas",
        "ack_batch.mid",
        "give_back.writing",
        "nack.after_requeue",
        "daemon.recovery.mid",
        // Tested in delayed_crash.rs.
        "delay.after_publish",
        "delay.after_release",
        // Tested in crash_blocks.rs (large payloads, a segment with blocks).
        "block.after_alloc",
        "ack.before_block_release",
        // Tested in tests/shapes/batches.rs.
        "batch.before_count_pushed",
        "batch.after_complete",
        // Tested in shapes/unique.rs (pushes with a key).
        "key.locked",
        "key.writing",
        "key.after_bind",
        // Tested in shm-layout/tests/crash_search.rs (a consumer killed while it searches).
        "search.after_begin",
    ];
    for (p, _) in xtcq_shm::failpoint::POINTS {
        assert!(covered.contains(p), "fail point {p} has no test in crash_daemon.rs or delayed_crash.rs");
    }
}

#[test]
fn producer_killed_after_allocating_a_record() {
    producer_dies("alloc.after_begin_fill", "producer", 1024, 50);
}

#[test]
fn producer_killed_after_publishing_before_indexing() {
    producer_dies("publish.before_index", "producer", 1024, 50);
}

#[test]
fn owner_killed_after_the_slot_write_before_bottom() {
    producer_dies("push.after_slot_write", "producer", 1024, 50);
}

#[test]
fn injector_killed_after_filling_an_overflow_cell() {
    producer_dies("overflow.push.after_cell", "injector", 1024, 50);
}

#[test]
fn owner_killed_after_the_bottom_decrement_of_a_pop() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    create_queue(&c, 2, 1024, Flavor::Lifo, 0);
    let l = logs_in(&d, &["dying"]);
    run_dying(&d, "producer", &l[0], (300, 0), ("pop.after_bottom_decrement", 20), &[("XTCQ_TEST_POP", "1")]);
    let reruns = drain_and_check(&d, &[(l[0].clone(), true)], 0);
    assert_eq!(reruns, Reruns { ran: 0, claimed: 0 }, "the pop died before its claim");
}

#[test]
fn thief_killed_after_winning_the_cas_on_top() {
    // Capacity 1024: all 300 jobs in the deque, so steals take the deque path.
    let reruns = consumer_dies("steal.after_cas", 1024, 20, &[]);
    assert_eq!(reruns.ran, 0, "the thief died before running what it stole: {reruns:?}");
}

#[test]
fn thief_killed_after_taking_a_batch_before_claiming_it() {
    // The handles it took name Queued records in no index: the daemon must index them again.
    let reruns = consumer_dies("steal_batch.after_cas", 1024, 5, &[]);
    assert_eq!(reruns.ran, 0, "the thief died before running what it stole: {reruns:?}");
}

#[test]
fn consumer_killed_half_way_through_acking_a_batch() {
    // The batch's first job is acked; the rest were run and come back with an attempt more.
    let reruns = consumer_dies("ack_batch.mid", 1024, 5, &[("XTCQ_TEST_ACK_ALL", "1")]);
    assert!(reruns.ran >= 1, "the jobs it ran and had not acked are re-run: {reruns:?}");
}

#[test]
fn consumer_killed_after_its_claim() {
    let reruns = consumer_dies("claim.after_cas", 1024, 20, &[]);
    assert_eq!(reruns.ran, 0, "it died before reading the payload: {reruns:?}");
    assert!(reruns.claimed >= 1, "the job it had claimed comes back with an attempt more: {reruns:?}");
}

#[test]
fn consumer_killed_after_taking_an_overflow_cell() {
    // Capacity 16: most of the 300 jobs spill into the overflow ring, which steals try first.
    let reruns = consumer_dies("overflow.pop.after_cell", 16, 20, &[]);
    assert_eq!(reruns.ran, 0, "it died before running what it took: {reruns:?}");
}

#[test]
fn consumer_killed_after_running_a_job_before_its_ack() {
    let reruns = consumer_dies("ack.before_cas", 1024, 20, &[]);
    assert_eq!(reruns.ran, 1, "the job it ran is re-run once: {reruns:?}");
}

#[test]
fn consumer_killed_while_writing_the_header_of_a_nack() {
    let reruns = consumer_dies("give_back.writing", 1024, 5, &[("XTCQ_TEST_NACK", "1")]);
    assert_eq!(reruns.ran, 1, "the job being nacked is run again, once: {reruns:?}");
}

#[test]
fn consumer_killed_after_a_nack_re_queued_a_job_before_indexing_it() {
    let reruns = consumer_dies("nack.after_requeue", 1024, 5, &[("XTCQ_TEST_NACK", "1")]);
    assert_eq!(reruns.ran, 1, "the job being nacked is run again, once: {reruns:?}");
}

#[test]
fn daemon_killed_half_way_through_a_recovery_and_restarted() {
    // Hit 1: the start of the recovery of the dying consumer; hit 2: after revoking its first
    // claimed job, before re-queuing it.
    let mut d = Daemon::builder()
        .flags(MEDIUM_SEGMENT)
        .envs([("XTCQ_FAILPOINTS", "daemon.recovery.mid=kill@2")])
        .start();
    let dir = d.dir().to_path_buf();
    {
        let c = d.client();
        create_queue(&c, 2, 1024, Flavor::Lifo, 0);
    }
    let l = logs_in(&d, &["producer", "dying"]);
    let mut producer = spawn_role(
        module_path!(),
        "producer",
        &d.socket,
        &role_env(&l[0], 300, 0, &[("XTCQ_TEST_HOLD", "1")]),
    );
    assert_eq!(producer.line(Duration::from_secs(20)), "pushed");
    // The consumer claims a batch and exits holding it; recovering it kills the daemon.
    let mut dying = spawn_role(
        module_path!(),
        "consumer",
        &d.socket,
        &role_env(&l[1], 0, 0, &[("XTCQ_TEST_DIE_HOLDING", "1")]),
    );
    let st = dying.wait_dead(Duration::from_secs(20));
    assert!(st.success(), "the consumer should exit holding its jobs: {st:?}");
    let st = d.wait_exit(Duration::from_secs(10));
    assert_eq!(
        st.signal(),
        Some(libc::SIGKILL),
        "the daemon should die at its fail point: {st:?}\n{}",
        d.log_text()
    );
    // A new daemon on the same socket and segment finishes the recovery; the producer, alive
    // all along, keeps its deque.
    let mut d2 = Daemon::builder().at(&dir).flags(MEDIUM_SEGMENT).start();
    d2.adopt_dir(&mut d);
    for what in ["adopted a live attached process", "re-queued claims a previous daemon revoked"] {
        let seen = eventually(Duration::from_secs(5), || d2.log_text().contains(what).then_some(()));
        assert!(seen.is_some(), "the new daemon should log {what:?}:\n{}", d2.log_text());
    }
    producer.release();
    let _ = producer.finish(Duration::from_secs(10));
    let reruns = drain_and_check(&d2, &[(l[0].clone(), false), (l[1].clone(), true)], 0);
    assert_eq!(reruns.ran, 3, "the dead consumer's three jobs are re-run: {reruns:?}");
}

#[test]
fn an_expired_lease_re_queues_the_job_of_a_live_hung_consumer() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).flags(["--lease-scan-interval", "20ms"]).start();
    let c = d.client();
    create_queue(&c, 1, 64, Flavor::Fifo, 300);
    let owner = c.attach_owner(QUEUE).unwrap();
    owner.push(b"L1").unwrap();
    let mut hung = spawn_role(module_path!(), "hang", &d.socket, &[]);
    let line = hung.line(Duration::from_secs(10));
    let deadline: u64 = line
        .strip_prefix("claimed L1 deadline ")
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("unexpected {line:?}"));
    assert!(deadline > 0, "the claim carries the queue's lease");
    let t0 = Instant::now();
    let thief = c.attach_thief(QUEUE).unwrap();
    // Never twice at the same time: while its lease runs, the job is not to be had.
    assert!(thief.steal().unwrap().is_none(), "a claimed job must not be stealable");
    let j = thief
        .steal_wait(Some(Duration::from_secs(5)))
        .unwrap()
        .expect("the job comes back once its lease (300 ms) has expired");
    let took = t0.elapsed();
    assert_eq!(j.payload().unwrap(), b"L1");
    assert_eq!(j.attempts(), 1, "the expired attempt is counted");
    let now = xtcq_shm::segment::monotonic_ns();
    assert!(now >= deadline, "re-queued {} ms before its lease expired", (deadline - now) / 1_000_000);
    j.ack().unwrap();
    // The hung consumer wakes up and acks late: it is told, and nothing is acked twice.
    hung.release();
    assert_eq!(hung.line(Duration::from_secs(10)), "ack lease-expired");
    let _ = hung.finish(Duration::from_secs(10));
    assert!(
        eventually(Duration::from_secs(5), || d.log_text().contains("lease expired").then_some(())).is_some(),
        "the daemon logs what it re-queued"
    );
    eprintln!("job re-queued {took:?} after the hung consumer claimed it (lease 300 ms)");
}
