//! A process dies at each fail point of the delayed-job transitions, and nothing is lost:
//! - `delay.after_publish` in a delayed push, and in a give-back with a delay: the record is
//!   `Delayed`, nobody was told; a record scan (what the daemon runs after recovering a dead
//!   process) finds it, and once released it is stolen with its payload;
//! - `delay.after_release` (the daemon made a due job `Queued`, did not index it): recovery's
//!   re-index of orphans puts it in line.
//!
//! The dying process is this test binary re-run with `XTCQ_DELAY_ROLE` set and
//! `XTCQ_FAILPOINTS=<point>=abort`. Needs `--features failpoints`.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use xtcq_shm::check::check_segment;
use xtcq_shm::delayed::{release_due, scan_delayed, Released};
use xtcq_shm::recovery::{recover_holder, reindex_orphans};
use xtcq_shm::segment::monotonic_ns;
use xtcq_shm::{Injector, QueueSpec, Segment, SegmentConfig, State, Thief};

const CHILD_SLOT: u32 = 3;
const PARENT_SLOT: u32 = 1;

fn config() -> SegmentConfig {
    SegmentConfig::small()
        .with_queues(1, 1)
        .with_deque_capacity(16)
        .with_records(64)
        .with_overflow_capacity(64)
}

/// The child: `push` (a delayed push), `fail` (steal, give back with a delay), `release`
/// (release every delayed job, as the daemon's timer does).
#[test]
fn delay_child() {
    let Ok(role) = std::env::var("XTCQ_DELAY_ROLE") else { return };
    let seg = Arc::new(Segment::attach(Path::new(&std::env::var("XTCQ_DELAY_SEGMENT").unwrap())).unwrap());
    let q = seg.queue_by_name("d").unwrap();
    match role.as_str() {
        "push" => {
            let inj = Injector::new(seg.clone(), &q, CHILD_SLOT).unwrap();
            inj.push_delayed(b"pushed", monotonic_ns()).unwrap();
        }
        "fail" => {
            let thief = Thief::new(seg.clone(), &q, CHILD_SLOT).unwrap();
            let job = thief.steal().unwrap().expect("a job");
            job.fail_after(Some("boom"), Duration::from_millis(1)).unwrap();
        }
        "release" => {
            for j in scan_delayed(&seg) {
                release_due(&seg, j.handle);
            }
        }
        r => panic!("unknown role {r}"),
    }
    // Reaching here means the fail point did not fire.
    std::process::exit(0);
}

fn run_child(seg: &Path, role: &str, point: &str) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["delay_child", "--exact", "--nocapture", "--test-threads", "1"])
        .env("XTCQ_DELAY_ROLE", role)
        .env("XTCQ_DELAY_SEGMENT", seg)
        .env("XTCQ_FAILPOINTS", format!("{point}=abort"))
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(6), "child {role} should have died at {point}: {status}");
}

fn setup() -> (tempfile::TempDir, Arc<Segment>, xtcq_shm::QueueInfo) {
    let dir = tempfile::tempdir().unwrap();
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), &config(), 0o600).unwrap());
    let q = seg.create_queue(&QueueSpec { deques: 1, capacity: 16, ..QueueSpec::new("d") }).unwrap();
    (dir, seg, q)
}

/// What the daemon does after the child died: recover its slot, scan for delayed jobs,
/// release those due; then one job is stolen with `payload`, and the segment is consistent.
fn recover_and_drain(seg: &Arc<Segment>, q: &xtcq_shm::QueueInfo, payload: &[u8]) -> u32 {
    recover_holder(seg, CHILD_SLOT);
    reindex_orphans(seg);
    for j in scan_delayed(seg) {
        assert!(matches!(release_due(seg, j.handle), Released::Queued { .. }));
    }
    let thief = Thief::new(seg.clone(), q, PARENT_SLOT).unwrap();
    let job = thief.steal().unwrap().expect("the job was lost");
    assert_eq!(job.payload().unwrap(), payload);
    let attempts = job.attempts();
    job.ack().unwrap();
    assert!(thief.steal().unwrap().is_none());
    let r = check_segment(seg, true);
    assert!(r.is_consistent(), "{:?}", r.problems);
    attempts
}

#[test]
fn dies_after_a_delayed_push_before_telling_the_daemon() {
    let (dir, seg, q) = setup();
    run_child(&dir.path().join("seg"), "push", "delay.after_publish");
    let found = scan_delayed(&seg);
    assert_eq!(found.len(), 1);
    assert_eq!(seg.records().state(found[0].handle.index).unwrap().load().state(), Some(State::Delayed));
    // Delayed: no steal sees it before it is released.
    assert!(Thief::new(seg.clone(), &q, PARENT_SLOT).unwrap().steal().unwrap().is_none());
    assert_eq!(recover_and_drain(&seg, &q, b"pushed"), 0);
}

#[test]
fn dies_after_a_delayed_give_back_before_telling_the_daemon() {
    let (dir, seg, q) = setup();
    Injector::new(seg.clone(), &q, PARENT_SLOT).unwrap().push(b"job").unwrap();
    run_child(&dir.path().join("seg"), "fail", "delay.after_publish");
    assert_eq!(scan_delayed(&seg).len(), 1);
    assert_eq!(recover_and_drain(&seg, &q, b"job"), 1, "the failed attempt is counted once");
}

#[test]
fn daemon_dies_after_releasing_a_due_job_before_indexing_it() {
    let (dir, seg, q) = setup();
    Injector::new(seg.clone(), &q, PARENT_SLOT).unwrap().push_delayed(b"due", monotonic_ns()).unwrap();
    run_child(&dir.path().join("seg"), "release", "delay.after_release");
    assert!(scan_delayed(&seg).is_empty(), "released: Queued now");
    assert_eq!(recover_and_drain(&seg, &q, b"due"), 0);
}
