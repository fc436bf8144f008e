//! Payload blocks across real deaths, with the real `xtcqd` recovering: a producer killed
//! (SIGKILL) between taking a block and publishing its job, a consumer killed holding a large
//! job, and one killed between its ack and giving the job's block back; and (red team 3) the
//! batch path and block allocation killed at their worst places:
//!
//! - a batch consumer killed (from outside) holding a claimed batch of large jobs, read;
//! - one killed right after its one CAS took a batch of handles (none claimed);
//! - one killed in `ack_all` with the first job acked and the rest of the batch claimed;
//! - one killed inside `ack_all` between a job's ack and its block's release;
//! - an overflow-ring producer killed holding a block for a record it has not published.
//!
//! Every job pushed is acked exactly once (counting the acks the dead process finished) with
//! its payload whole (a job held at the kill re-run, counted), and once the daemon has
//! recovered the dead process no payload block is held: none leaked.
//!
//! - The single-job tests and the batch tests each have their [`Setup`]: a segment with its
//!   own count of 64 KiB blocks and jobs of their own sizes, which their comments count on.
//! - Children are this test binary re-run in a role ([`child_main`]), logging each completed
//!   step unbuffered: `T id` trying to push, `P id` pushed, `B 0` a batch taken, `R id` a job
//!   read (running), `H 0` holding its batch, `A id` acked.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use xtcq_client::{Client, Error, Flavor, JobBatch, QueueParams};
use xtcq_testkit::*;

const QUEUE: &str = "big";

/// A segment and the jobs pushed into it: 64-byte inline areas, 64 blocks of 4 KiB and
/// `big_blocks` of 64 KiB; job `id` is 20 bytes (inline) when a multiple of `inline_every`,
/// else 60 KiB when a multiple of `large_every`, else 3 KiB.
#[derive(Clone, Copy, Debug)]
struct Setup {
    big_blocks: u32,
    inline_every: u64,
    large_every: u64,
}

/// The single-job roles (`producer`, `consumer`): 8 blocks of 64 KiB.
const SINGLE: Setup = Setup { big_blocks: 8, inline_every: 5, large_every: 4 };

/// The batch roles (`batch`, `hold`, `injector`): 16 blocks of 64 KiB, as a batch of 8 may
/// hold 8 large jobs while more wait queued.
const BATCH: Setup = Setup { big_blocks: 16, inline_every: 7, large_every: 3 };

impl Setup {
    /// Job `id`'s payload: its id in ASCII, a space, then bytes that depend on it.
    fn payload(self, id: u64) -> Vec<u8> {
        let len = match id {
            _ if id.is_multiple_of(self.inline_every) => 20,
            _ if id.is_multiple_of(self.large_every) => 60 << 10,
            _ => 3 << 10,
        };
        let mut p = format!("{id} ").into_bytes();
        p.extend((p.len()..len).map(|k| b'a' + ((id as usize + k) % 26) as u8));
        p
    }

    /// The id of a payload, after checking it is whole.
    fn id_of(self, p: &[u8]) -> Result<u64, Error> {
        let head = p.split(|&b| b == b' ').next().unwrap_or_default();
        let id: u64 =
            String::from_utf8_lossy(head).parse().map_err(|_| Error::Corrupt("bad payload".into()))?;
        if p != self.payload(id) {
            return Err(Error::Corrupt(format!("payload of job {id} is not what was pushed")));
        }
        Ok(id)
    }
}

#[test]
fn child_main() {
    child_entry(run_role);
}

/// A child's log of completed steps, one line each, written unbuffered (it may die next).
struct Steps(File);

impl Steps {
    fn line(&mut self, s: String) {
        self.0.write_all(format!("{s}\n").as_bytes()).expect("log");
    }
}

fn run_role(role: &str) -> Result<(), Error> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::var("XTCQ_TEST_LOG").expect("XTCQ_TEST_LOG"))
        .expect("log file");
    let mut log = Steps(log);
    let c = Client::connect(None)?;
    match role {
        "producer" => {
            let owner = c.attach_owner(QUEUE)?;
            for id in 1000..1000 + env_or("XTCQ_TEST_N", 20) {
                log.line(format!("T {id}"));
                owner.push(&SINGLE.payload(id))?;
                log.line(format!("P {id}"));
            }
        }
        "consumer" => {
            let thief = c.attach_thief(QUEUE)?;
            while let Some(j) = thief.steal_wait(Some(Duration::from_secs(1)))? {
                let id = SINGLE.id_of(&j.payload()?)?;
                log.line(format!("R {id}"));
                j.ack()?;
                log.line(format!("A {id}"));
            }
        }
        "batch" => run_batches(&c, &mut log)?,
        "hold" => {
            // Claims a batch, reads every payload, then waits to be killed holding it.
            let thief = c.attach_thief(QUEUE)?;
            let mut batch = JobBatch::new();
            thief.steal_into(8, &mut batch)?;
            log.line("B 0".into());
            for i in 0..batch.len() {
                log.line(format!("R {}", BATCH.id_of(&batch.payload(i)?)?));
            }
            log.line("H 0".into());
            std::thread::sleep(Duration::from_secs(600));
        }
        "injector" => {
            let inj = c.attach_injector(QUEUE)?;
            for id in 1000..1010 {
                inj.push(&BATCH.payload(id))?;
                log.line(format!("P {id}"));
            }
        }
        other => return Err(Error::Corrupt(format!("unknown role {other}"))),
    }
    Ok(())
}

/// The `batch` role: batches of up to 8, each read whole, then acked with `ack_all`.
fn run_batches(c: &Client, log: &mut Steps) -> Result<(), Error> {
    let thief = c.attach_thief(QUEUE)?;
    let mut batch = JobBatch::new();
    while thief.steal_into(8, &mut batch)? > 0 {
        log.line("B 0".into());
        let mut ids = Vec::new();
        for i in 0..batch.len() {
            let id = BATCH.id_of(&batch.payload(i)?)?;
            log.line(format!("R {id}"));
            ids.push(id);
        }
        batch.ack_all()?;
        for id in ids {
            log.line(format!("A {id}"));
        }
    }
    Ok(())
}

/// Starts a daemon on `s`'s segment, creates the queue, pushes `ids` from this process.
fn setup(s: Setup, ids: std::ops::Range<u64>) -> (tempfile::TempDir, Daemon, Client) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let blocks = format!("4KiB=64,64KiB={}", s.big_blocks);
    let d = Daemon::builder().at(tmp.path()).flags(large_payload_segment(64, &blocks)).start();
    let c = d.client();
    let q = QueueParams {
        name: QUEUE.into(),
        deques: 2,
        capacity: 64,
        flavor: Flavor::Fifo,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    };
    c.create_queue(&q).expect("create queue");
    let owner = c.attach_owner(QUEUE).expect("owner");
    for id in ids {
        owner.push(&s.payload(id)).expect("push");
    }
    (tmp, d, c)
}

/// What a dead child's log says.
#[derive(Default, Debug)]
struct Log {
    pushed: BTreeSet<u64>,
    acked: BTreeSet<u64>,
    /// The jobs it was running (read, not acked) when it died.
    running: BTreeSet<u64>,
    /// The jobs read in the batch it died in, in order, less those acked.
    last_batch: Vec<u64>,
}

/// Runs `role` with `point` armed at its `nth` hit; asserts it was killed there; returns what
/// its log says.
fn run_dying(d: &Daemon, role: &str, point: &str, nth: u32) -> Log {
    let log = d.dir().join(format!("{role}.log"));
    let env =
        [("XTCQ_TEST_LOG", log.display().to_string()), ("XTCQ_FAILPOINTS", format!("{point}=kill@{nth}"))];
    let mut r = spawn_role(module_path!(), role, &d.socket, &env);
    let st = r.wait_dead(Duration::from_secs(30));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{role} not killed at {point}: {st:?}; log:\n{text}");
    let mut l = Log::default();
    for s in text.lines() {
        let (k, id) = s.split_once(' ').expect("log line");
        let id: u64 = id.parse().expect("id");
        match k {
            "B" => l.last_batch.clear(),
            "R" => {
                l.running.insert(id);
                l.last_batch.push(id);
            }
            "A" => {
                l.running.remove(&id);
                l.acked.insert(id);
            }
            "P" => drop(l.pushed.insert(id)),
            _ => {}
        }
    }
    l.last_batch.retain(|id| !l.acked.contains(id));
    l
}

/// Once the daemon has recovered the dead child: drains the queue (payloads of `s` checked,
/// each id once) and waits until no payload block is held. Returns each id drained with its
/// attempts.
fn drain_after_recovery(d: &Daemon, c: &Client, s: Setup) -> BTreeMap<u64, u32> {
    let me = std::process::id();
    eventually(Duration::from_secs(20), || {
        let st = c.stats(Some(QUEUE)).ok()?;
        st.processes.iter().all(|p| p.pid == me).then_some(())
    })
    .unwrap_or_else(|| panic!("child not recovered; daemon log:\n{}", d.log_text()));
    let thief = c.attach_thief(QUEUE).expect("thief");
    let mut got = BTreeMap::new();
    // Stray handles (taken by a dead batch steal, never claimed) are indexed again by the
    // daemon's sweep: keep stealing until a whole quiet wait finds nothing.
    while let Some(j) = thief.steal_wait(Some(Duration::from_millis(1500))).expect("steal") {
        let id = s.id_of(&j.payload().expect("payload")).expect("whole payload");
        let attempts = j.attempts();
        j.ack().expect("ack");
        assert!(got.insert(id, attempts).is_none(), "job {id} handed out twice");
    }
    drop(thief);
    eventually(Duration::from_secs(20), || {
        let r = c.check_with_strays(false, Duration::ZERO).ok()?;
        (r.counts.blocks.held == 0).then_some(r)
    })
    .unwrap_or_else(|| panic!("payload blocks leaked; daemon log:\n{}", d.log_text()));
    got
}

fn ids(m: &BTreeMap<u64, u32>) -> BTreeSet<u64> {
    m.keys().copied().collect()
}

/// No job of `0..n` lost: each was acked by the dead child (in its log, or in `also`: acked
/// in the batch it died in, after its last log line) or drained after its death.
fn assert_none_lost(l: &Log, got: &BTreeMap<u64, u32>, also: &[u64], n: u64) {
    let mut all: BTreeSet<u64> = l.acked.union(&ids(got)).copied().collect();
    all.extend(also);
    assert_eq!(all, (0..n).collect(), "jobs lost: {l:?}");
}

/// `role` (a pusher of jobs 1000..) killed after taking its `nth` block, before publishing
/// that job, with jobs `0..queued` queued first: every job queued or logged as pushed comes
/// back once, and the dying push is not published.
fn pusher_killed_after_taking_a_block(s: Setup, queued: u64, role: &str, nth: u32) {
    let (_tmp, d, c) = setup(s, 0..queued);
    let l = run_dying(&d, role, "block.after_alloc", nth);
    let got = drain_after_recovery(&d, &c, s);
    let want: BTreeSet<u64> = (0..queued).chain(l.pushed.iter().copied()).collect();
    assert_eq!(ids(&got), want, "jobs lost, or the dying push published: {l:?}");
}

#[test]
fn a_producer_killed_between_taking_a_block_and_publishing_loses_nothing_and_leaks_no_block() {
    pusher_killed_after_taking_a_block(SINGLE, 10, "producer", 5);
}

#[test]
fn a_consumer_killed_holding_a_large_job_loses_nothing_and_leaks_no_block() {
    let (_tmp, d, c) = setup(SINGLE, 0..12);
    // The 4th claim is job 3 (3 KiB, in a block): killed right after the claim CAS.
    let l = run_dying(&d, "consumer", "claim.after_cas", 4);
    let got = drain_after_recovery(&d, &c, SINGLE);
    assert_eq!(l.acked, (0..3).collect(), "the consumer acked the first three");
    assert_eq!(ids(&got), (3..12).collect(), "each left job once");
    assert!(got[&3] >= 1, "the job it held is re-run with an attempt counted: {got:?}");
}

#[test]
fn a_consumer_killed_between_its_ack_and_the_blocks_release_leaks_no_block() {
    let (_tmp, d, c) = setup(SINGLE, 0..12);
    // The 4th ack (job 3, in a block) frees the record, then the consumer dies.
    let l = run_dying(&d, "consumer", "ack.before_block_release", 4);
    assert_eq!((l.acked.len(), l.running), (3, BTreeSet::from([3])), "died inside job 3's ack");
    let got = drain_after_recovery(&d, &c, SINGLE);
    assert_eq!(ids(&got), (4..12).collect(), "job 3 was acked: not run again");
}

#[test]
fn a_batch_thief_killed_after_its_cas_before_any_claim_loses_nothing() {
    let (_tmp, d, c) = setup(BATCH, 0..24);
    let l = run_dying(&d, "batch", "steal_batch.after_cas", 2);
    let got = drain_after_recovery(&d, &c, BATCH);
    assert!(l.acked.is_disjoint(&ids(&got)), "an acked job ran again: {l:?}");
    assert_none_lost(&l, &got, &[], 24);
}

#[test]
fn a_batch_thief_killed_mid_ack_all_reruns_only_the_unacked_rest() {
    let (_tmp, d, c) = setup(BATCH, 0..24);
    let l = run_dying(&d, "batch", "ack_batch.mid", 2);
    assert!(l.last_batch.len() >= 2, "the dying batch had more than one job: {l:?}");
    let got = drain_after_recovery(&d, &c, BATCH);
    let first = l.last_batch[0];
    assert!(!got.contains_key(&first), "job {first}, acked before the kill, ran again");
    for id in &l.last_batch[1..] {
        assert!(
            got.get(id).is_some_and(|&a| a >= 1),
            "job {id}, claimed at the kill, not re-run counted: {got:?}"
        );
    }
    assert_none_lost(&l, &got, &[first], 24);
}

#[test]
fn a_batch_thief_killed_between_an_ack_and_its_block_release_leaks_no_block() {
    let (_tmp, d, c) = setup(BATCH, 0..24);
    // The 10th ack: the dying batch's second job (batches of up to 8 from a deque of 12).
    let l = run_dying(&d, "batch", "ack.before_block_release", 10);
    let got = drain_after_recovery(&d, &c, BATCH);
    let done: usize = l.acked.len();
    let acked_in_dying = 10 - done;
    assert!(acked_in_dying >= 1 && acked_in_dying <= l.last_batch.len(), "{l:?}");
    for id in &l.last_batch[..acked_in_dying] {
        assert!(!got.contains_key(id), "job {id}, acked before the kill, ran again");
    }
    assert_none_lost(&l, &got, &l.last_batch[..acked_in_dying], 24);
}

#[test]
fn an_injector_killed_holding_a_block_for_an_unpublished_job_leaks_nothing() {
    // Jobs 1000..: the 3rd block taken is job 1003's (1001 is inline, 1002 60 KiB).
    pusher_killed_after_taking_a_block(BATCH, 4, "injector", 3);
}

#[test]
fn a_batch_thief_killed_holding_a_claimed_batch_of_large_jobs_loses_nothing() {
    let (_tmp, d, c) = setup(BATCH, 0..24);
    let log = d.dir().join("hold.log");
    let mut r =
        spawn_role(module_path!(), "hold", &d.socket, &[("XTCQ_TEST_LOG", log.display().to_string())]);
    wait_until(Duration::from_secs(30), "the batch is held", || {
        std::fs::read_to_string(&log).unwrap_or_default().contains("H 0")
    });
    r.kill9();
    let held: Vec<u64> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .filter_map(|l| l.strip_prefix("R ").and_then(|id| id.parse().ok()))
        .collect();
    assert!(held.len() > 1, "held {held:?}");
    let got = drain_after_recovery(&d, &c, BATCH);
    assert_eq!(ids(&got), (0..24).collect(), "jobs lost");
    for id in &held {
        assert!(got[id] >= 1, "job {id}, held at the kill, came back without an attempt counted: {got:?}");
    }
}
