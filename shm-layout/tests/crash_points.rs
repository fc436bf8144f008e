//! A process dies at each fail point of the shared-memory protocols; recovery (what the daemon
//! runs when a pidfd says a process exited) gives back what it held; the queue drains with
//! every job acked exactly once, except the job whose consumer died after running it, which is
//! re-run once; `check_segment` finds the segment consistent afterwards.
//!
//! The dying process is this test binary re-run with `XTCQ_CRASH_ROLE` set and
//! `XTCQ_FAILPOINTS=<point>=abort@N`; it logs what it did to a file, one line per completed
//! step, so the parent knows what happened before the crash. Needs `--features failpoints`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use xtcq_shm::check::check_segment;
use xtcq_shm::recovery::{recover_holder, reindex_orphans, release_deque_leases};
use xtcq_shm::{Flavor, Owner, QueueSpec, Segment, SegmentConfig, Thief};

const PARENT_JOBS: u64 = 100;
const CHILD_JOBS: u64 = 100;
const CHILD_SLOT: u32 = 3;

fn config() -> SegmentConfig {
    SegmentConfig::small()
        .with_queues(1, 2)
        .with_deque_capacity(16)
        .with_records(512)
        .with_overflow_capacity(512)
}

fn id_of(p: &[u8]) -> u64 {
    u64::from_le_bytes(p[..8].try_into().expect("8-byte id"))
}

/// What the child does, by role: `produce` (owner of deque 1, pushes ids 1000..), `pop`
/// (owner of deque 0, LIFO pops and acks), `steal` (thief, steals and acks), `nack` (thief,
/// steals and nacks).
#[test]
fn crash_child() {
    let Ok(role) = std::env::var("XTCQ_CRASH_ROLE") else { return };
    let seg_path = std::env::var("XTCQ_CRASH_SEGMENT").expect("segment");
    let log_path = std::env::var("XTCQ_CRASH_LOG").expect("log");
    let mut log = std::fs::File::create(log_path).expect("log file");
    let seg = Arc::new(Segment::attach(Path::new(&seg_path)).expect("attach"));
    let q = seg.queue_by_name("crash").expect("queue");
    let mut line = |s: String| {
        // Unbuffered: the process may die right after.
        log.write_all(s.as_bytes()).expect("log");
    };
    match role.as_str() {
        "produce" => {
            let owner = Owner::new(seg.clone(), &q, 1, CHILD_SLOT).expect("owner");
            for id in 1000..1000 + CHILD_JOBS {
                line(format!("T {id}\n"));
                owner.push(&id.to_le_bytes()).expect("push");
                line(format!("P {id}\n"));
            }
        }
        "pop" => {
            let owner = Owner::new(seg.clone(), &q, 0, CHILD_SLOT).expect("owner");
            while let Some(j) = owner.pop().expect("pop") {
                let id = id_of(&j.payload().expect("payload"));
                line(format!("R {id}\n"));
                j.ack().expect("ack");
                line(format!("A {id}\n"));
            }
        }
        "steal" | "nack" => {
            let thief = Thief::new(seg.clone(), &q, CHILD_SLOT).expect("thief");
            while let Some(j) = thief.steal().expect("steal") {
                let id = id_of(&j.payload().expect("payload"));
                line(format!("R {id}\n"));
                if role == "nack" {
                    if j.attempts() > 0 {
                        // Nack each job once, so the run ends.
                        j.ack().expect("ack");
                        line(format!("A {id}\n"));
                    } else {
                        j.nack().expect("nack");
                        line(format!("N {id}\n"));
                    }
                } else {
                    j.ack().expect("ack");
                    line(format!("A {id}\n"));
                }
            }
        }
        "batch" => batch_role(&seg, &q, &mut line),
        "produce_batch" => produce_batch_role(&seg, &q, &mut line),
        r => panic!("unknown role {r}"),
    }
    // Reaching here means the fail point was never hit; the parent fails the test.
}

/// The `batch` role: thief, batches of up to 4 (`steal_batch_claimed`), payloads read, then
/// `ack_all`. The first job of a batch is logged acked before `ack_all`: `ack_batch.mid` dies
/// after `ack_all`'s first ack, and no other fail point of this role lies between that log line
/// and that ack.
fn batch_role(seg: &Arc<Segment>, q: &xtcq_shm::QueueInfo, line: &mut impl FnMut(String)) {
    let thief = Thief::new(seg.clone(), q, CHILD_SLOT).expect("thief");
    let mut batch = xtcq_shm::ClaimedBatch::new();
    while thief.steal_batch_claimed(4, &mut batch).expect("steal batch") > 0 {
        let ids: Vec<u64> = batch.jobs().iter().map(|j| id_of(&j.payload().expect("payload"))).collect();
        for id in &ids {
            line(format!("R {id}\n"));
        }
        line(format!("A {}\n", ids[0]));
        batch.ack_all().expect("ack_all");
        for id in &ids[1..] {
            line(format!("A {id}\n"));
        }
    }
}

/// The `produce_batch` role: owner, `push_batch` of 4 jobs at a time; what its deque has no
/// room for goes by single `push` (to the overflow ring). Each id is logged in flight before
/// its batch and pushed once `push_batch` (or `push`) returned it queued.
fn produce_batch_role(seg: &Arc<Segment>, q: &xtcq_shm::QueueInfo, line: &mut impl FnMut(String)) {
    let owner = Owner::new(seg.clone(), q, 1, CHILD_SLOT).expect("owner");
    let ids: Vec<u64> = (1000..1000 + CHILD_JOBS).collect();
    for chunk in ids.chunks(4) {
        for id in chunk {
            line(format!("T {id}\n"));
        }
        let payloads: Vec<[u8; 8]> = chunk.iter().map(|id| id.to_le_bytes()).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        let n = owner.push_batch(&refs).expect("push_batch");
        for id in &chunk[..n] {
            line(format!("P {id}\n"));
        }
        for id in &chunk[n..] {
            owner.push(&id.to_le_bytes()).expect("push");
            line(format!("P {id}\n"));
        }
    }
}

struct Outcome {
    /// Acked by the child before it died.
    child_acked: BTreeSet<u64>,
    /// Started by the child (payload read) but not acked.
    child_unfinished: BTreeSet<u64>,
    /// Pushed by the child and confirmed (push returned).
    child_pushed: BTreeSet<u64>,
    /// The child's pushes in flight when it died (one, or a batch's).
    child_push_in_flight: BTreeSet<u64>,
}

fn run_child(seg: &Path, dir: &Path, role: &str, point: &str, nth: u32) -> Outcome {
    let log = dir.join("child.log");
    let status = Command::new(std::env::current_exe().expect("exe"))
        .args(["crash_child", "--exact", "--nocapture", "--test-threads", "1"])
        .env("XTCQ_CRASH_ROLE", role)
        .env("XTCQ_CRASH_SEGMENT", seg)
        .env("XTCQ_CRASH_LOG", &log)
        .env("XTCQ_FAILPOINTS", format!("{point}=abort@{nth}"))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run child");
    assert_eq!(
        status.signal(),
        Some(libc_sigabrt()),
        "child ({role}) should have died at fail point {point}, exited with {status}"
    );
    let mut o = Outcome {
        child_acked: BTreeSet::new(),
        child_unfinished: BTreeSet::new(),
        child_pushed: BTreeSet::new(),
        child_push_in_flight: BTreeSet::new(),
    };
    for l in std::fs::read_to_string(&log).expect("child log").lines() {
        let (k, v) = l.split_once(' ').expect("log line");
        let id: u64 = v.parse().expect("id");
        match k {
            "T" => {
                o.child_push_in_flight.insert(id);
            }
            "P" => {
                o.child_pushed.insert(id);
                o.child_push_in_flight.remove(&id);
            }
            "R" => {
                o.child_unfinished.insert(id);
            }
            "A" => {
                o.child_unfinished.remove(&id);
                o.child_acked.insert(id);
            }
            "N" => {
                o.child_unfinished.remove(&id);
            }
            _ => panic!("bad log line {l}"),
        }
    }
    o
}

fn libc_sigabrt() -> i32 {
    6
}

/// Pushes the parent's jobs, lets the child crash at `point`, recovers, drains, checks;
/// returns the jobs recovery re-indexed as orphans.
fn crash_at(point: &str, role: &str, flavor: Flavor, capacity: u32, nth: u32) -> Vec<xtcq_shm::JobHandle> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    let seg = Arc::new(Segment::create(&path, &config(), 0o600).expect("create"));
    let q = seg
        .create_queue(&QueueSpec {
            name: "crash".into(),
            flavor,
            deques: 2,
            capacity,
            max_attempts: 0,
            lease_ms: 0,
            levels: 1,
            aging: 0,
        })
        .expect("queue");
    {
        let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
        for id in 0..PARENT_JOBS {
            owner.push(&id.to_le_bytes()).expect("push");
        }
    }
    let o = run_child(&path, dir.path(), role, point, nth);

    // What the daemon does on the child's death.
    let rec = recover_holder(&seg, CHILD_SLOT);
    release_deque_leases(&seg, CHILD_SLOT);
    let orphans = reindex_orphans(&seg);
    // What `xtcq check` says of the recovered segment before anyone drains it.
    let report = check_segment(&seg, true);
    assert!(report.is_consistent(), "{point}: check right after recovery: {:?}", report.problems);

    let thief = Thief::new(seg.clone(), &q, 1).expect("thief");
    let mut parent_acked: BTreeMap<u64, u32> = BTreeMap::new();
    for _ in 0..10 * (PARENT_JOBS + CHILD_JOBS) {
        let Some(j) = thief.steal().expect("steal") else { break };
        let id = id_of(&j.payload().expect("payload"));
        let attempts = j.attempts();
        j.ack().expect("ack");
        assert!(parent_acked.insert(id, attempts).is_none(), "{point}: job {id} handed out twice");
    }

    let mut expected: BTreeSet<u64> = (0..PARENT_JOBS).collect();
    expected.extend(&o.child_pushed);
    for id in &o.child_acked {
        assert!(
            !parent_acked.contains_key(id),
            "{point}: job {id} acked by the child and again after recovery"
        );
    }
    let all_acked: BTreeSet<u64> =
        o.child_acked.iter().copied().chain(parent_acked.keys().copied()).collect();
    let missing: Vec<_> = expected.difference(&all_acked).collect();
    assert!(missing.is_empty(), "{point}: jobs lost: {missing:?} (recovery {rec:?}, orphans {orphans:?})");
    let extra: Vec<_> =
        all_acked.difference(&expected).filter(|id| !o.child_push_in_flight.contains(id)).collect();
    assert!(extra.is_empty(), "{point}: jobs that were never pushed: {extra:?}");
    let reruns: Vec<_> = o.child_unfinished.iter().filter(|id| parent_acked.contains_key(id)).collect();
    for id in &reruns {
        assert!(parent_acked[id] >= 1, "{point}: re-run job {id} should count an attempt");
    }
    let report = check_segment(&seg, true);
    assert!(report.is_consistent(), "{point}: check after recovery: {:?}", report.problems);
    eprintln!(
        "{point}: child acked {}, re-run {}, orphans re-indexed {}, recovered {:?}",
        o.child_acked.len(),
        reruns.len(),
        orphans.len(),
        rec
    );
    orphans
}

#[test]
fn alloc_after_begin_fill() {
    crash_at("alloc.after_begin_fill", "produce", Flavor::Lifo, 16, 5);
}

#[test]
fn publish_before_index() {
    crash_at("publish.before_index", "produce", Flavor::Lifo, 16, 5);
}

/// A producer killed part-way through a `push_batch`, after publishing two of the batch's
/// records and before the deque's `bottom` covers them: they are queued in no index, and
/// recovery's orphan scan indexes them (each runs once; none is lost).
#[test]
fn publish_before_index_in_a_batch() {
    crash_at("publish.before_index", "produce_batch", Flavor::Fifo, 16, 6);
}

#[test]
fn push_after_slot_write() {
    crash_at("push.after_slot_write", "produce", Flavor::Lifo, 16, 5);
}

#[test]
fn overflow_push_after_cell() {
    // Deque 1 holds 16; push 20 gets to the overflow ring. Its cell is full, `tail` not yet
    // past it: the job is indexed, and recovery must not index it a second time.
    let orphans = crash_at("overflow.push.after_cell", "produce", Flavor::Lifo, 16, 4);
    assert!(orphans.is_empty(), "a job its dead pusher had put in a ring cell was re-indexed: {orphans:?}");
}

#[test]
fn pop_after_bottom_decrement() {
    crash_at("pop.after_bottom_decrement", "pop", Flavor::Lifo, 16, 3);
}

#[test]
fn steal_after_cas() {
    // The thief drains the overflow ring first; the 5th steal from a deque dies.
    crash_at("steal.after_cas", "steal", Flavor::Fifo, 16, 5);
}

#[test]
fn claim_after_cas() {
    crash_at("claim.after_cas", "steal", Flavor::Fifo, 16, 7);
}

#[test]
fn overflow_pop_after_cell() {
    crash_at("overflow.pop.after_cell", "steal", Flavor::Fifo, 16, 5);
}

#[test]
fn ack_before_cas() {
    crash_at("ack.before_cas", "steal", Flavor::Lifo, 16, 5);
}

#[test]
fn give_back_writing() {
    crash_at("give_back.writing", "nack", Flavor::Lifo, 16, 3);
}

#[test]
fn nack_after_requeue() {
    crash_at("nack.after_requeue", "nack", Flavor::Lifo, 16, 3);
}

#[test]
fn steal_batch_after_cas() {
    // 84 jobs on the overflow ring come first (21 batches); the 2nd batch from a deque dies
    // with 4 handles taken and none claimed: orphans, which recovery indexes again.
    crash_at("steal_batch.after_cas", "batch", Flavor::Fifo, 16, 2);
}

#[test]
fn claim_after_cas_in_a_batch() {
    // The 90th claim: 84 from the ring, then the 2nd claim of the 2nd deque batch; the
    // batch's first is claimed, its second claimed as the process dies, the rest orphans.
    crash_at("claim.after_cas", "batch", Flavor::Fifo, 16, 90);
}

#[test]
fn ack_batch_mid() {
    // In the 23rd batch (the 2nd from a deque): its first job acked, three still claimed.
    crash_at("ack_batch.mid", "batch", Flavor::Fifo, 16, 23);
}

#[test]
fn every_protocol_fail_point_has_a_test() {
    let src = include_str!("crash_points.rs");
    // The delayed-job points have their own file (a job that waits, not a queue drained).
    let delayed = include_str!("crash_delayed.rs");
    // So have the payload-block points (large payloads, a segment with blocks).
    let blocks = include_str!("crash_blocks.rs");
    // The batch points need the daemon's completion: tested across processes.
    let batches = include_str!("../../tests/shapes/batches.rs");
    // And the key-table points (pushes with a key).
    let keys = include_str!("crash_keys.rs");
    // And the searchers' point (a consumer that dies in a wait).
    let search = include_str!("crash_search.rs");
    for (p, _) in xtcq_shm::failpoint::POINTS {
        if p.starts_with("daemon.") {
            continue;
        }
        if p.starts_with("key.") {
            assert!(keys.contains(&format!("crash_at(\"{p}\"")), "no crash test for {p} in crash_keys.rs");
            continue;
        }
        if p.starts_with("block.") || p.contains("block_release") {
            assert!(
                blocks.contains(&format!("crash_at(\"{p}\"")),
                "no crash test for {p} in crash_blocks.rs"
            );
            continue;
        }
        if p.starts_with("batch.") {
            let armed = format!("\"{p}=kill");
            assert!(batches.contains(&armed), "no crash test for fail point {p} in tests/shapes/batches.rs");
            continue;
        }
        if p.starts_with("search.") {
            let armed = format!("\"{p}=abort\"");
            assert!(search.contains(&armed), "no crash test for fail point {p} in crash_search.rs");
            continue;
        }
        if p.starts_with("delay.") {
            let quoted = format!("\"{p}\"");
            assert!(delayed.contains(&quoted), "no crash test for fail point {p} in crash_delayed.rs");
            continue;
        }
        assert!(src.contains(&format!("crash_at(\"{p}\"")), "no crash test for fail point {p}");
    }
}
