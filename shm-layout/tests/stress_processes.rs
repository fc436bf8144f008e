//! Exactly-once across OS processes, no daemon: this test process owns a deque and pushes
//! jobs; four thief processes (this test binary re-run with `XTCQ_CHILD_*` set, so each is a
//! separate process with its own mapping of the segment file) steal, ack and write the ids
//! they consumed to a file. The parent merges its own pops with the children's files and
//! asserts every id exactly once and every record free.
//!
//! `XTCQ_STRESS_JOBS` overrides the job count (default 1,000,000).

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xtcq_shm::{Flavor, Owner, PushError, QueueSpec, Segment, SegmentConfig, State, Thief};

const THIEF_PROCESSES: u32 = 4;
const QUEUE: &str = "procs";

fn jobs() -> u64 {
    std::env::var("XTCQ_STRESS_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000)
}

/// The child side: a no-op unless the parent set `XTCQ_CHILD_SEGMENT`.
#[test]
fn child_thief_process() {
    let Ok(seg_path) = std::env::var("XTCQ_CHILD_SEGMENT") else {
        return;
    };
    let out: PathBuf = std::env::var("XTCQ_CHILD_OUT").expect("XTCQ_CHILD_OUT").into();
    let stop: PathBuf = std::env::var("XTCQ_CHILD_STOP").expect("XTCQ_CHILD_STOP").into();
    let me: u32 = std::env::var("XTCQ_CHILD_SLOT").expect("slot").parse().expect("slot number");
    let batch = me.is_multiple_of(2);
    let seg = Arc::new(Segment::attach(Path::new(&seg_path)).expect("attach"));
    let q = seg.queue_by_name(QUEUE).expect("queue");
    let thief = Thief::new(seg.clone(), &q, me).expect("thief");
    let mut w = BufWriter::new(std::fs::File::create(&out).expect("out file"));
    let mut buf = Vec::new();
    let mut jobs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        assert!(Instant::now() < deadline, "child {me} ran too long");
        if batch {
            let _ = thief.steal_batch_from(0, 64, &mut jobs);
        }
        if jobs.is_empty() {
            if let Some(j) = thief.steal().expect("steal") {
                jobs.push(j);
            }
        }
        if jobs.is_empty() {
            // The parent creates the stop file only once every record is free again.
            if stop.exists() {
                break;
            }
            std::thread::yield_now();
            continue;
        }
        for j in jobs.drain(..) {
            buf.clear();
            j.read_payload(&mut buf).expect("payload");
            w.write_all(&buf[..8]).expect("write id");
            j.ack().expect("ack");
        }
    }
    w.flush().expect("flush");
}

fn spawn_thief(seg: &Path, dir: &Path, slot: u32) -> (Child, PathBuf) {
    let out = dir.join(format!("thief-{slot}.ids"));
    let child = Command::new(std::env::current_exe().expect("current exe"))
        .args(["child_thief_process", "--exact", "--nocapture", "--test-threads", "1"])
        .env("XTCQ_CHILD_SEGMENT", seg)
        .env("XTCQ_CHILD_OUT", &out)
        .env("XTCQ_CHILD_STOP", dir.join("stop"))
        .env("XTCQ_CHILD_SLOT", slot.to_string())
        .spawn()
        .expect("spawn thief process");
    (child, out)
}

#[test]
fn one_owner_process_four_thief_processes_exactly_once() {
    if std::env::var("XTCQ_CHILD_SEGMENT").is_ok() {
        return;
    }
    let n = jobs();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    let cfg = SegmentConfig::small()
        .with_queues(1, 1)
        .with_deque_capacity(256)
        .with_records(8192)
        .with_overflow_capacity(8192);
    let seg = Arc::new(Segment::create(&path, &cfg, 0o600).expect("create"));
    let q = seg
        .create_queue(&QueueSpec {
            name: QUEUE.into(),
            flavor: Flavor::Lifo,
            deques: 1,
            capacity: 256,
            max_attempts: 0,
            lease_ms: 0,
            levels: 1,
            aging: 0,
        })
        .expect("queue");
    let children: Vec<_> = (1..=THIEF_PROCESSES).map(|s| spawn_thief(&path, dir.path(), s)).collect();

    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    let mut counts = vec![0u8; n as usize];
    let mut buf = Vec::new();
    let mut own_pop = |counts: &mut [u8]| -> bool {
        match owner.pop().expect("pop") {
            Some(j) => {
                buf.clear();
                j.read_payload(&mut buf).expect("payload");
                let id = u64::from_le_bytes(buf[..8].try_into().expect("id"));
                counts[id as usize] += 1;
                j.ack().expect("ack");
                true
            }
            None => false,
        }
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    for id in 0..n {
        loop {
            assert!(Instant::now() < deadline, "owner stuck pushing job {id}");
            match owner.push(&id.to_le_bytes()) {
                Ok(_) => break,
                Err(PushError::RecordsFull(_) | PushError::QueueFull { .. }) => {
                    if !own_pop(&mut counts) {
                        std::thread::yield_now();
                    }
                }
                Err(e) => panic!("push {id}: {e}"),
            }
        }
        if id % 11 == 0 {
            own_pop(&mut counts);
        }
    }
    // Every job acked ⇔ every record free; then tell the thieves to stop.
    let records = seg.records();
    loop {
        assert!(Instant::now() < deadline, "jobs never drained");
        own_pop(&mut counts);
        let busy = (0..records.len())
            .filter(|&i| records.state(i).map(|s| s.load().state()) != Some(Some(State::Free)))
            .count();
        if busy == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    std::fs::File::create(dir.path().join("stop")).expect("stop file");

    let mut by_child = Vec::new();
    for (mut child, out) in children {
        let status = child.wait().expect("wait thief");
        assert!(status.success(), "thief process failed: {status}");
        let mut bytes = Vec::new();
        std::fs::File::open(&out).expect("ids file").read_to_end(&mut bytes).expect("read ids");
        by_child.push(bytes.len() / 8);
        for chunk in bytes.chunks_exact(8) {
            let id = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            counts[id as usize] += 1;
        }
    }
    let bad: Vec<_> =
        counts.iter().enumerate().filter(|(_, &c)| c != 1).take(10).map(|(i, &c)| (i, c)).collect();
    assert!(bad.is_empty(), "ids not consumed exactly once (id, times): {bad:?}");
    eprintln!("{n} jobs; thief processes consumed {by_child:?}, the owner the rest");
}
