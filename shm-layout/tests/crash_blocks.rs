//! Payload blocks across a crash: a process killed (SIGKILL, as `kill -9`) between taking a
//! block and publishing its job, between acking a job and giving its block back, or while
//! it holds a large job, loses no job, runs none twice except the one it held, and leaks no
//! block: after recovery (what the daemon runs when a pidfd says a process exited) the
//! queue drains with every payload whole, `check_segment` finds nothing, and no block is held.
//!
//! The dying process is this test binary re-run with `XTCQ_BLOCK_ROLE` set and
//! `XTCQ_FAILPOINTS=<point>=kill@N`; it logs each completed step to a file, unbuffered. Needs
//! `--features failpoints`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use xtcq_shm::check::check_segment;
use xtcq_shm::layout::payload::PAYLOAD_CLASSES;
use xtcq_shm::recovery::{recover_holder, reindex_orphans, release_deque_leases};
use xtcq_shm::{Flavor, Owner, QueueSpec, Segment, SegmentConfig, Thief};

const PARENT_JOBS: u64 = 40;
const CHILD_JOBS: u64 = 40;
const CHILD_SLOT: u32 = 3;

/// Small records, 4 KiB blocks only: every payload past 64 bytes takes a 4 KiB block (the
/// smaller classes have none, so a push falls back to it).
fn config() -> SegmentConfig {
    let mut payload_blocks = [0; PAYLOAD_CLASSES];
    payload_blocks[5] = 128;
    SegmentConfig {
        queues: 1,
        deques_per_queue: 2,
        deque_capacity: 16,
        job_records: 256,
        payload_bytes: 4096,
        process_slots: 8,
        overflow_capacity: 256,
        inline_bytes: 64,
        payload_blocks,
        keys: 0,
    }
}

/// Job `id`'s payload: the id, then bytes that depend on it, 65 to 4096 bytes in all (so the
/// payload lives in a block), except every fifth job, which fits inline.
fn payload(id: u64) -> Vec<u8> {
    let len = if id.is_multiple_of(5) { 40 } else { 65 + (id as usize * 997) % (4096 - 65) };
    let mut p = id.to_le_bytes().to_vec();
    p.extend((8..len).map(|k| (id as usize * 31 + k) as u8));
    p
}

/// The id of a payload, after checking it is whole.
fn id_of(p: &[u8]) -> u64 {
    let id = u64::from_le_bytes(p[..8].try_into().expect("8-byte id"));
    assert_eq!(p, payload(id), "payload of job {id} is not what was pushed");
    id
}

/// The child: `produce` (owner of deque 1 pushes ids 1000..) or `steal` (steals and acks).
#[test]
fn block_crash_child() {
    let Ok(role) = std::env::var("XTCQ_BLOCK_ROLE") else { return };
    let seg_path = std::env::var("XTCQ_BLOCK_SEGMENT").expect("segment");
    let mut log = std::fs::File::create(std::env::var("XTCQ_BLOCK_LOG").expect("log")).expect("log file");
    let seg = Arc::new(Segment::attach(Path::new(&seg_path)).expect("attach"));
    let q = seg.queue_by_name("blocks").expect("queue");
    let mut line = |s: String| log.write_all(s.as_bytes()).expect("log");
    match role.as_str() {
        "produce" => {
            let owner = Owner::new(seg.clone(), &q, 1, CHILD_SLOT).expect("owner");
            for id in 1000..1000 + CHILD_JOBS {
                line(format!("T {id}\n"));
                owner.push(&payload(id)).expect("push");
                line(format!("P {id}\n"));
            }
        }
        "steal" => {
            let thief = Thief::new(seg.clone(), &q, CHILD_SLOT).expect("thief");
            while let Some(j) = thief.steal().expect("steal") {
                let id = id_of(&j.payload().expect("payload"));
                line(format!("R {id}\n"));
                j.ack().expect("ack");
                line(format!("A {id}\n"));
            }
        }
        r => panic!("unknown role {r}"),
    }
}

#[derive(Default)]
struct Outcome {
    acked: BTreeSet<u64>,
    unfinished: BTreeSet<u64>,
    pushed: BTreeSet<u64>,
    in_flight: Option<u64>,
}

fn run_child(seg: &Path, dir: &Path, role: &str, point: &str, nth: u32) -> Outcome {
    let log = dir.join("child.log");
    let status = Command::new(std::env::current_exe().expect("exe"))
        .args(["block_crash_child", "--exact", "--nocapture", "--test-threads", "1"])
        .env("XTCQ_BLOCK_ROLE", role)
        .env("XTCQ_BLOCK_SEGMENT", seg)
        .env("XTCQ_BLOCK_LOG", &log)
        .env("XTCQ_FAILPOINTS", format!("{point}=kill@{nth}"))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run child");
    assert_eq!(status.signal(), Some(9), "child ({role}) should have been killed at {point}: {status}");
    let mut o = Outcome::default();
    for l in std::fs::read_to_string(&log).expect("child log").lines() {
        let (k, v) = l.split_once(' ').expect("log line");
        let id: u64 = v.parse().expect("id");
        match k {
            "T" => o.in_flight = Some(id),
            "P" => {
                o.pushed.insert(id);
                o.in_flight = None;
            }
            "R" => {
                o.unfinished.insert(id);
            }
            "A" => {
                o.unfinished.remove(&id);
                o.acked.insert(id);
            }
            _ => panic!("bad log line {l}"),
        }
    }
    o
}

/// Pushes the parent's jobs, kills the child at `point`, recovers, drains, checks.
fn crash_at(point: &str, role: &str, nth: u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    let seg = Arc::new(Segment::create(&path, &config(), 0o600).expect("create"));
    let spec = QueueSpec {
        name: "blocks".into(),
        flavor: Flavor::Fifo,
        deques: 2,
        capacity: 16,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    };
    let q = seg.create_queue(&spec).expect("queue");
    {
        let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
        for id in 0..PARENT_JOBS {
            owner.push(&payload(id)).expect("push");
        }
    }
    let mut o = run_child(&path, dir.path(), role, point, nth);
    if point == "ack.before_block_release" {
        // Its ack CAS was made (the record is free), only the log line is missing.
        let done: Vec<u64> = std::mem::take(&mut o.unfinished).into_iter().collect();
        assert_eq!(done.len(), 1, "{point}: the child died inside one ack");
        o.acked.extend(done);
    }
    let held_before = seg.records().blocks().held().count();

    // What the daemon does on the child's death.
    let rec = recover_holder(&seg, CHILD_SLOT);
    release_deque_leases(&seg, CHILD_SLOT);
    reindex_orphans(&seg);

    let thief = Thief::new(seg.clone(), &q, 1).expect("thief");
    let mut acked: BTreeMap<u64, u32> = BTreeMap::new();
    while let Some(j) = thief.steal().expect("steal") {
        let id = id_of(&j.payload().expect("payload"));
        let attempts = j.attempts();
        j.ack().expect("ack");
        assert!(acked.insert(id, attempts).is_none(), "{point}: job {id} handed out twice");
        assert!(acked.len() <= (PARENT_JOBS + CHILD_JOBS) as usize, "{point}: more jobs than pushed");
    }
    let mut expected: BTreeSet<u64> = (0..PARENT_JOBS).collect();
    expected.extend(&o.pushed);
    for id in &o.acked {
        assert!(!acked.contains_key(id), "{point}: job {id} acked by the child and again after recovery");
    }
    let all: BTreeSet<u64> = o.acked.iter().copied().chain(acked.keys().copied()).collect();
    let missing: Vec<_> = expected.difference(&all).collect();
    assert!(missing.is_empty(), "{point}: jobs lost: {missing:?} (recovery {rec:?})");
    let extra: Vec<_> = all.difference(&expected).filter(|&&id| Some(id) != o.in_flight).collect();
    assert!(extra.is_empty(), "{point}: jobs never pushed: {extra:?}");
    for id in o.unfinished.iter().filter(|id| acked.contains_key(id)) {
        assert!(acked[id] >= 1, "{point}: re-run job {id} should count an attempt");
    }
    let report = check_segment(&seg, true);
    assert!(report.is_consistent(), "{point}: check after recovery: {:?}", report.problems);
    let held: Vec<_> = seg.records().blocks().held().collect();
    assert!(held.is_empty(), "{point}: blocks leaked: {held:?} (recovery {rec:?})");
    eprintln!("{point}: held at the crash {held_before}, recovery {rec:?}");
}

#[test]
fn block_after_alloc() {
    // The 4th push that takes a block dies before it publishes.
    crash_at("block.after_alloc", "produce", 4);
}

#[test]
fn ack_before_block_release() {
    crash_at("ack.before_block_release", "steal", 6);
}

#[test]
fn claim_after_cas_holding_a_large_job() {
    // Job 7 (the 8th stolen, FIFO) has a block: its consumer dies holding it.
    crash_at("claim.after_cas", "steal", 8);
}

#[test]
fn ack_before_cas_holding_a_large_job() {
    crash_at("ack.before_cas", "steal", 7);
}
