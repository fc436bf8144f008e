//! Payload blocks across real deaths, with the real `xtcqd` recovering: a producer killed
//! (SIGKILL) between taking a block and publishing its job, a consumer killed holding a large
//! job, and one killed between its ack and giving the job's block back. Every job pushed is
//! acked exactly once with its payload whole (the held one re-run, counted), and once the
//! daemon has recovered the dead process no payload block is held: none leaked.
//!
//! Children are this test binary re-run in a role ([`child_main`]), logging each completed
//! step (`T id` trying to push, `P id` pushed, `R id` running, `A id` acked) unbuffered.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use xtcq_client::{Client, Error, Flavor, QueueParams};
use xtcq_testkit::*;

const QUEUE: &str = "big";

/// 64-byte inline areas; 64 blocks of 4 KiB and 8 of 64 KiB.
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
    "4KiB=64,64KiB=8",
    "--process-slots",
    "16",
    "--overflow-capacity",
    "256",
];

/// Job `id`'s payload: its id in ASCII, a space, then bytes that depend on it; 3 KiB, except
/// every fourth job 60 KiB and every fifth 20 bytes (inline).
fn payload(id: u64) -> Vec<u8> {
    let len = match id {
        _ if id.is_multiple_of(5) => 20,
        _ if id.is_multiple_of(4) => 60 << 10,
        _ => 3 << 10,
    };
    let mut p = format!("{id} ").into_bytes();
    p.extend((p.len()..len).map(|k| b'a' + ((id as usize + k) % 26) as u8));
    p
}

/// The id of a payload, after checking it is whole.
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
    let n: u64 = env_or("XTCQ_TEST_N", 20);
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::var("XTCQ_TEST_LOG").expect("XTCQ_TEST_LOG"))
        .expect("log file");
    let mut line = |s: String| log.write_all(format!("{s}\n").as_bytes()).expect("log");
    let c = Client::connect(None)?;
    match role {
        "producer" => {
            let owner = c.attach_owner(QUEUE)?;
            for id in 1000..1000 + n {
                line(format!("T {id}"));
                owner.push(&payload(id))?;
                line(format!("P {id}"));
            }
        }
        "consumer" => {
            let thief = c.attach_thief(QUEUE)?;
            while let Some(j) = thief.steal_wait(Some(Duration::from_secs(1)))? {
                let id = id_of(&j.payload()?)?;
                line(format!("R {id}"));
                j.ack()?;
                line(format!("A {id}"));
            }
        }
        other => return Err(Error::Corrupt(format!("unknown role {other}"))),
    }
    Ok(())
}

/// Starts a daemon, creates the queue, pushes `ids` from this process.
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

/// Runs `role` with `point` armed at its `nth` hit; asserts it was killed there; returns what
/// its log says: ids pushed, ids acked, ids it was running when it died.
fn run_dying(
    d: &Daemon,
    dir: &Path,
    role: &str,
    point: &str,
    nth: u32,
) -> (BTreeSet<u64>, BTreeSet<u64>, BTreeSet<u64>) {
    let log = dir.join(format!("{role}.log"));
    let fp = format!("{point}=kill@{nth}");
    let env = [("XTCQ_TEST_LOG", log.display().to_string()), ("XTCQ_FAILPOINTS", fp)];
    let mut r = spawn_role(role, &d.socket, &env);
    let st = r.wait_dead(Duration::from_secs(20));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{role} not killed at {point}: {st:?}; log:\n{text}");
    let (mut pushed, mut acked, mut running) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for l in text.lines() {
        let (k, id) = l.split_once(' ').expect("log line");
        let id: u64 = id.parse().expect("id");
        match k {
            "P" => drop(pushed.insert(id)),
            "R" => drop(running.insert(id)),
            "A" => {
                running.remove(&id);
                acked.insert(id);
            }
            _ => {}
        }
    }
    (pushed, acked, running)
}

/// Once the daemon has recovered the dead child: drains the queue (payloads checked), and
/// waits until no payload block is held. Returns each id drained with its attempts.
fn drain_after_recovery(d: &Daemon, c: &Client) -> BTreeMap<u64, u32> {
    let me = std::process::id();
    eventually(Duration::from_secs(10), || {
        let s = c.stats(Some(QUEUE)).ok()?;
        s.processes.iter().all(|p| p.pid == me).then_some(())
    })
    .unwrap_or_else(|| panic!("child not recovered; daemon log:\n{}", d.log_text()));
    let thief = c.attach_thief(QUEUE).expect("thief");
    let mut got = BTreeMap::new();
    while let Some(j) = thief.steal_wait(Some(Duration::from_millis(300))).expect("steal") {
        let id = id_of(&j.payload().expect("payload")).expect("whole payload");
        let attempts = j.attempts();
        j.ack().expect("ack");
        assert!(got.insert(id, attempts).is_none(), "job {id} handed out twice");
    }
    drop(thief);
    eventually(Duration::from_secs(10), || {
        let r = c.check_with_strays(false, Duration::ZERO).ok()?;
        (r.counts.blocks.held == 0).then_some(r)
    })
    .unwrap_or_else(|| panic!("payload blocks leaked; daemon log:\n{}", d.log_text()));
    got
}

#[test]
fn a_producer_killed_between_taking_a_block_and_publishing_loses_nothing_and_leaks_no_block() {
    let (_tmp, d, c) = setup(0..10);
    let (pushed, _, _) = run_dying(&d, d.dir(), "producer", "block.after_alloc", 5);
    let got = drain_after_recovery(&d, &c);
    let want: BTreeSet<u64> = (0..10).chain(pushed.iter().copied()).collect();
    assert_eq!(got.keys().copied().collect::<BTreeSet<_>>(), want, "jobs lost, or the dying push published");
}

#[test]
fn a_consumer_killed_holding_a_large_job_loses_nothing_and_leaks_no_block() {
    let (_tmp, d, c) = setup(0..12);
    // The 4th claim is job 3 (3 KiB, in a block): killed right after the claim CAS.
    let (_, acked, _) = run_dying(&d, d.dir(), "consumer", "claim.after_cas", 4);
    let got = drain_after_recovery(&d, &c);
    assert_eq!(acked, (0..3).collect(), "the consumer acked the first three");
    assert_eq!(got.keys().copied().collect::<BTreeSet<_>>(), (3..12).collect(), "each left job once");
    assert!(got[&3] >= 1, "the job it held is re-run with an attempt counted: {got:?}");
}

#[test]
fn a_consumer_killed_between_its_ack_and_the_blocks_release_leaks_no_block() {
    let (_tmp, d, c) = setup(0..12);
    // The 4th ack (job 3, in a block) frees the record, then the consumer dies.
    let (_, acked, running) = run_dying(&d, d.dir(), "consumer", "ack.before_block_release", 4);
    assert_eq!((acked.len(), running), (3, BTreeSet::from([3])), "died inside job 3's ack");
    let got = drain_after_recovery(&d, &c);
    assert_eq!(
        got.keys().copied().collect::<BTreeSet<_>>(),
        (4..12).collect(),
        "job 3 was acked: not run again"
    );
}
