//! Red team 3: `kill -9` at the worst places of the batch path and of block allocation, with
//! large payloads, and the real `xtcqd` recovering. Every job pushed is acked exactly once
//! (counting the acks the dead process finished), every payload comes back whole, and once
//! the daemon has recovered the dead child no payload block is held.
//!
//! - a batch consumer killed (from outside) holding a claimed batch of large jobs, read;
//! - one killed right after its one CAS took a batch of handles (none claimed);
//! - one killed in `ack_all` with the first job acked and the rest of the batch claimed;
//! - one killed inside `ack_all` between a job's ack and its block's release;
//! - an overflow-ring producer killed holding a block for a record it has not published.
//!
//! Children are this test binary re-run in a role ([`child_main`]), logging `B` at each
//! batch, `R id` for each job read, `H 0` once holding, `A id` after `ack_all`, `P id`
//! after a push.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use xtcq_client::{Client, Error, Flavor, JobBatch, QueueParams};
use xtcq_testkit::*;

const QUEUE: &str = "big";

const SIZES: &[&str] = &[
    "--queues",
    "2",
    "--deques-per-queue",
    "2",
    "--deque-capacity",
    "64",
    "--records",
    "256",
    "--payload-bytes",
    "65536",
    "--inline-bytes",
    "64",
    "--payload-blocks",
    "4KiB=64,64KiB=16",
    "--process-slots",
    "16",
    "--overflow-capacity",
    "256",
];

/// Job `id`'s payload: its id, a space, then bytes that depend on it; 3 KiB, every third 60
/// KiB, every seventh 20 bytes (inline).
fn payload(id: u64) -> Vec<u8> {
    let len = match id {
        _ if id.is_multiple_of(7) => 20,
        _ if id.is_multiple_of(3) => 60 << 10,
        _ => 3 << 10,
    };
    let mut p = format!("{id} ").into_bytes();
    p.extend((p.len()..len).map(|k| b'A' + ((id as usize * 3 + k) % 26) as u8));
    p
}

fn id_of(p: &[u8]) -> Result<u64, Error> {
    let head = p.split(|&b| b == b' ').next().unwrap_or_default();
    let id: u64 = String::from_utf8_lossy(head).parse().map_err(|_| Error::Corrupt("bad payload".into()))?;
    if p != payload(id) {
        return Err(Error::Corrupt(format!("payload of job {id} is not what was pushed")));
    }
    Ok(id)
}

#[test]
fn child_main() {
    child_entry(run_role);
}

fn run_role(role: &str) -> Result<(), Error> {
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::var("XTCQ_TEST_LOG").expect("XTCQ_TEST_LOG"))
        .expect("log file");
    let mut line = |s: String| log.write_all(format!("{s}\n").as_bytes()).expect("log");
    let c = Client::connect(None)?;
    match role {
        "batch" => {
            let thief = c.attach_thief(QUEUE)?;
            let mut batch = JobBatch::new();
            while thief.steal_into(8, &mut batch)? > 0 {
                line("B 0".into());
                let mut ids = Vec::new();
                for i in 0..batch.len() {
                    let id = id_of(&batch.payload(i)?)?;
                    line(format!("R {id}"));
                    ids.push(id);
                }
                batch.ack_all()?;
                for id in ids {
                    line(format!("A {id}"));
                }
            }
        }
        "hold" => {
            // Claims a batch, reads every payload, then waits to be killed holding it.
            let thief = c.attach_thief(QUEUE)?;
            let mut batch = JobBatch::new();
            thief.steal_into(8, &mut batch)?;
            line("B 0".into());
            for i in 0..batch.len() {
                line(format!("R {}", id_of(&batch.payload(i)?)?));
            }
            line("H 0".into());
            std::thread::sleep(Duration::from_secs(600));
        }
        "injector" => {
            let inj = c.attach_injector(QUEUE)?;
            for id in 1000..1010 {
                inj.push(&payload(id))?;
                line(format!("P {id}"));
            }
        }
        other => return Err(Error::Corrupt(format!("unknown role {other}"))),
    }
    Ok(())
}

fn setup(ids: std::ops::Range<u64>) -> (tempfile::TempDir, Daemon, Client) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = Daemon::builder().at(tmp.path()).flags(SIZES).start();
    let c = d.client();
    let q = QueueParams {
        name: QUEUE.into(),
        deques: 2,
        capacity: 64,
        flavor: Flavor::Fifo,
        max_attempts: 0,
        lease_ms: 0,
    };
    c.create_queue(&q).expect("create queue");
    let owner = c.attach_owner(QUEUE).expect("owner");
    for id in ids {
        owner.push(&payload(id)).expect("push");
    }
    (tmp, d, c)
}

/// What a dead child's log says.
#[derive(Default, Debug)]
struct Log {
    pushed: BTreeSet<u64>,
    acked: BTreeSet<u64>,
    /// The jobs read in the batch it died in, in order.
    last_batch: Vec<u64>,
}

fn run_dying(d: &Daemon, role: &str, point: &str, nth: u32) -> Log {
    let log = d.dir().join(format!("{role}.log"));
    let env =
        [("XTCQ_TEST_LOG", log.display().to_string()), ("XTCQ_FAILPOINTS", format!("{point}=kill@{nth}"))];
    let mut r = spawn_role(role, &d.socket, &env);
    let st = r.wait_dead(Duration::from_secs(30));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{role} not killed at {point}: {st:?}; log:\n{text}");
    let mut l = Log::default();
    for s in text.lines() {
        let (k, id) = s.split_once(' ').expect("log line");
        let id: u64 = id.parse().expect("id");
        match k {
            "B" => l.last_batch.clear(),
            "R" => l.last_batch.push(id),
            "A" => drop(l.acked.insert(id)),
            "P" => drop(l.pushed.insert(id)),
            _ => {}
        }
    }
    l.last_batch.retain(|id| !l.acked.contains(id));
    l
}

/// Once the daemon has recovered the dead child: drains the queue (payloads checked, each id
/// once) and waits until no payload block is held.
fn drain_after_recovery(d: &Daemon, c: &Client) -> BTreeMap<u64, u32> {
    let me = std::process::id();
    eventually(Duration::from_secs(20), || {
        let s = c.stats(Some(QUEUE)).ok()?;
        s.processes.iter().all(|p| p.pid == me).then_some(())
    })
    .unwrap_or_else(|| panic!("child not recovered; daemon log:\n{}", d.log_text()));
    let thief = c.attach_thief(QUEUE).expect("thief");
    let mut got = BTreeMap::new();
    // Stray handles (taken by a dead batch steal, never claimed) are indexed again by the
    // daemon's sweep: keep stealing until a whole quiet wait finds nothing.
    while let Some(j) = thief.steal_wait(Some(Duration::from_millis(1500))).expect("steal") {
        let id = id_of(&j.payload().expect("payload")).expect("whole payload");
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

#[test]
fn a_batch_thief_killed_after_its_cas_before_any_claim_loses_nothing() {
    let (_tmp, d, c) = setup(0..24);
    let l = run_dying(&d, "batch", "steal_batch.after_cas", 2);
    let got = drain_after_recovery(&d, &c);
    assert!(l.acked.is_disjoint(&ids(&got)), "an acked job ran again: {l:?}");
    let all: BTreeSet<u64> = l.acked.union(&ids(&got)).copied().collect();
    assert_eq!(all, (0..24).collect(), "jobs lost: {l:?}");
}

#[test]
fn a_batch_thief_killed_mid_ack_all_reruns_only_the_unacked_rest() {
    let (_tmp, d, c) = setup(0..24);
    let l = run_dying(&d, "batch", "ack_batch.mid", 2);
    assert!(l.last_batch.len() >= 2, "the dying batch had more than one job: {l:?}");
    let got = drain_after_recovery(&d, &c);
    let first = l.last_batch[0];
    assert!(!got.contains_key(&first), "job {first}, acked before the kill, ran again");
    for id in &l.last_batch[1..] {
        assert!(
            got.get(id).is_some_and(|&a| a >= 1),
            "job {id}, claimed at the kill, not re-run counted: {got:?}"
        );
    }
    let mut all: BTreeSet<u64> = l.acked.union(&ids(&got)).copied().collect();
    all.insert(first);
    assert_eq!(all, (0..24).collect(), "jobs lost: {l:?}");
}

#[test]
fn a_batch_thief_killed_between_an_ack_and_its_block_release_leaks_no_block() {
    let (_tmp, d, c) = setup(0..24);
    // The 10th ack: the dying batch's second job (batches of up to 8 from a deque of 12).
    let l = run_dying(&d, "batch", "ack.before_block_release", 10);
    let got = drain_after_recovery(&d, &c);
    let done: usize = l.acked.len();
    let acked_in_dying = 10 - done;
    assert!(acked_in_dying >= 1 && acked_in_dying <= l.last_batch.len(), "{l:?}");
    for id in &l.last_batch[..acked_in_dying] {
        assert!(!got.contains_key(id), "job {id}, acked before the kill, ran again");
    }
    let mut all: BTreeSet<u64> = l.acked.union(&ids(&got)).copied().collect();
    all.extend(&l.last_batch[..acked_in_dying]);
    assert_eq!(all, (0..24).collect(), "jobs lost: {l:?}");
}

#[test]
fn an_injector_killed_holding_a_block_for_an_unpublished_job_leaks_nothing() {
    let (_tmp, d, c) = setup(0..4);
    // Jobs 1000..: the 3rd block taken is job 1002's (1001 is 3 KiB, 1002 60 KiB? see payload).
    let l = run_dying(&d, "injector", "block.after_alloc", 3);
    let got = drain_after_recovery(&d, &c);
    let want: BTreeSet<u64> = (0..4).chain(l.pushed.iter().copied()).collect();
    assert_eq!(ids(&got), want, "a job lost, or the dying push published: {l:?}");
}

#[test]
fn a_batch_thief_killed_holding_a_claimed_batch_of_large_jobs_loses_nothing() {
    let (_tmp, d, c) = setup(0..24);
    let log = d.dir().join("hold.log");
    let mut r = spawn_role("hold", &d.socket, &[("XTCQ_TEST_LOG", log.display().to_string())]);
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
    let got = drain_after_recovery(&d, &c);
    assert_eq!(ids(&got), (0..24).collect(), "jobs lost");
    for id in &held {
        assert!(got[id] >= 1, "job {id}, held at the kill, came back without an attempt counted: {got:?}");
    }
}
