//! Deleting queues in the daemon: the registry's checks and its one lock against attaches
//! (driven step by step, in the orders the server's concurrent connections can produce), and
//! the real `xtcqd` with in-process clients: an owner that detached no longer counts, a thief
//! or a running job does, and a delete a daemon crash interrupted is finished by the next one.

use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use xtcq_client::Error;
use xtcq_proto::{ErrorCode, Flavor, QueueParams, ROLE_OWNER, ROLE_THIEF};
use xtcq_shm::layout::{QueueEntry, QUEUE_DELETING, QUEUE_FREE};
use xtcq_shm::{Flavor as SegFlavor, Segment, SegmentConfig};
use xtcq_testkit::*;
use xtcqd::persistence::state::StateFile;
use xtcqd::registry::{ProcessId, Registry};

fn params(name: &str, deques: u32, capacity: u32) -> QueueParams {
    QueueParams {
        name: name.into(),
        deques,
        capacity,
        flavor: Flavor::Fifo,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    }
}

fn registry() -> (tempfile::TempDir, Arc<Segment>, Registry) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = SegmentConfig::small()
        .with_deque_capacity(16)
        .with_records(64)
        .with_overflow_capacity(64)
        .with_payload_bytes(16);
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), &cfg, 0o600).expect("segment"));
    let reg = Registry::new(seg.clone());
    (dir, seg, reg)
}

const ALIVE: fn(u32, u64) -> bool = |_, _| true;
const DEAD: fn(u32, u64) -> bool = |_, _| false;

/// Every lease word of entry `index`.
fn leases(seg: &Segment, index: u32) -> Vec<u64> {
    (0..seg.config().deques_per_queue)
        .map(|d| seg.deque_header(index, d).expect("deque").lease.load(Ordering::Acquire))
        .collect()
}

#[test]
fn an_attach_that_looked_the_queue_up_before_a_delete_does_not_attach_to_what_replaced_it() {
    let (_d, seg, reg) = registry();
    reg.create_queue(&params("q", 2, 16)).expect("create");
    let p = ProcessId { pid: 4242, uid: 0, start_time: 1 };
    let slot = reg.register(p, ROLE_THIEF | ROLE_OWNER, reg.keeper()).expect("register");

    // The server attaches in three steps: a look without the lock (so that a request for no
    // queue registers no slot), the slot, then the attach under the registry's lock. Another
    // connection's delete can come between the first and the last.
    let looked = reg.queue("q").expect("look");
    reg.delete_queue("q", false, ALIVE).expect("delete");
    let e = reg.attach("q", slot, ROLE_THIEF).expect_err("the queue is gone");
    assert_eq!(e.code, ErrorCode::NoSuchQueue, "{e}");
    let e = reg.lease("q", None, slot).expect_err("the queue is gone");
    assert_eq!(e.code, ErrorCode::NoSuchQueue, "{e}");
    // ... and another queue now in the entry is not attached to by mistake (an attach that
    // used the index it looked up would hand out `other`'s deques described as `q`'s).
    let other = reg.create_queue(&params("other", 1, 4)).expect("create other");
    assert_eq!(other.index, looked.index);
    assert_eq!(reg.attach("q", slot, ROLE_THIEF).expect_err("still gone").code, ErrorCode::NoSuchQueue);
    assert_eq!(reg.lease("q", Some(0), slot).expect_err("still gone").code, ErrorCode::NoSuchQueue);
    assert!(leases(&seg, looked.index).iter().all(|&w| w == 0), "no lease taken on `other`");
    reg.delete_queue("other", false, ALIVE).expect("nobody attached to other");

    // Recreated under the same name: the attach gets the new queue, described as it is, and
    // from then on the delete is refused, naming the process.
    reg.create_queue(&params("q", 1, 8)).expect("create q again");
    let q2 = reg.attach("q", slot, ROLE_THIEF).expect("attach");
    assert_eq!((q2.spec.deques, q2.spec.capacity, q2.spec.flavor), (1, 8, SegFlavor::Fifo));
    for force in [false, true] {
        let r = reg.delete_queue("q", force, ALIVE).expect_err("a thief is attached");
        assert_eq!(r.reply.code, ErrorCode::QueueInUse);
        assert!(r.reply.message.contains("pid 4242 (thief)"), "{}", r.reply.message);
        assert!(!r.only_exited, "a live process: no use waiting");
    }
    // Its process has exited but is not recovered yet: still in the way, but worth waiting for.
    let r = reg.delete_queue("q", true, DEAD).expect_err("not recovered yet");
    assert!(r.only_exited);
    assert!(
        r.reply.message.contains("pid 4242 (thief, exited: xtcqd is still giving back"),
        "{}",
        r.reply.message
    );
    // What the watcher does once the process is gone.
    reg.recover_process(slot);
    let d = reg.delete_queue("q", false, ALIVE).expect("delete after the exit");
    assert_eq!(d.queue.name, "q");
    assert!(xtcq_shm::check::check_segment(&seg, true).is_consistent());
}

#[test]
fn an_owner_blocks_a_delete_until_it_detaches_and_a_running_job_until_it_is_given_back() {
    let (_d, seg, reg) = registry();
    reg.create_queue(&params("o", 2, 16)).expect("create");
    let p = ProcessId { pid: 77, uid: 0, start_time: 9 };
    let slot = reg.register(p, ROLE_OWNER, reg.keeper()).expect("register");
    let (q, d, word) = reg.lease("o", None, slot).expect("lease");
    let r = reg.delete_queue("o", true, ALIVE).expect_err("owned");
    assert_eq!(r.reply.code, ErrorCode::QueueInUse);
    assert!(r.reply.message.contains(&format!("pid 77 (owner of deque {d})")), "{}", r.reply.message);

    // The owner pushes a job and pops it (a claim), then detaches: the claim still counts.
    {
        let owner = xtcq_shm::Owner::new(seg.clone(), &q, d, slot.slot).expect("owner");
        owner.push(b"x").expect("push");
        let job = owner.pop().expect("pop").expect("a job");
        std::mem::forget(job); // running
    }
    reg.release_lease(&q, d, word).expect("detach");
    let r = reg.delete_queue("o", true, ALIVE).expect_err("a job is being run");
    assert_eq!(r.reply.code, ErrorCode::QueueInUse);
    assert!(r.reply.message.contains("pid 77 (running 1 of its jobs)"), "{}", r.reply.message);
    // Given back (its holder died, say): queued again; refused without force, then forced.
    let rec = xtcq_shm::recovery::recover_holder(&seg, slot.slot);
    assert_eq!(rec.requeued.len(), 1);
    let r = reg.delete_queue("o", false, ALIVE).expect_err("a queued job");
    assert_eq!(r.reply.code, ErrorCode::QueueNotEmpty);
    assert!(r.reply.message.contains("1 queued job(s) and 0 dead letter(s)"), "{}", r.reply.message);
    let done = reg.delete_queue("o", true, ALIVE).expect("forced");
    assert_eq!((done.dropped_queued, done.dropped_dead), (1, 0));
    assert_eq!(seg.queue_state(q.index), Some(QUEUE_FREE));
}

#[test]
fn a_process_adopted_after_a_restart_may_use_any_queue_so_every_delete_waits_for_it() {
    let (d, seg, _) = registry();
    let sock = d.path().join("xtcqd.sock");
    let prev = Registry::with_state(seg.clone(), StateFile::beside(&sock).expect("state"));
    prev.reset_state();
    prev.create_queue(&params("a", 1, 4)).expect("create");
    prev.create_queue(&params("b", 1, 4)).expect("create");
    // What a previous daemon left: a live thief's slot (thieves leave no trace of their
    // queue), in the segment and in its state file.
    let p = ProcessId { pid: 555, uid: 0, start_time: 12 };
    prev.register(p, ROLE_THIEF, prev.keeper()).expect("register");
    drop(prev);
    // As a starting daemon does before it adopts (the state file is the previous epoch's).
    seg.header_live().daemon_epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    let reg = Registry::with_state(seg.clone(), StateFile::beside(&sock).expect("state"));
    let adopted = reg.adopt(ALIVE);
    assert_eq!(adopted.len(), 1);
    for q in ["a", "b"] {
        let r = reg.delete_queue(q, true, ALIVE).expect_err("may be attached");
        assert_eq!(r.reply.code, ErrorCode::QueueInUse);
        assert!(
            r.reply.message.contains("pid 555 (attached before xtcqd restarted, so xtcqd cannot tell"),
            "{}",
            r.reply.message
        );
    }
    reg.recover_process(adopted[0].slot);
    reg.delete_queue("a", false, ALIVE).expect("delete a");
    reg.delete_queue("b", false, ALIVE).expect("delete b");
}

#[test]
fn through_the_daemon_a_detached_owner_no_longer_counts_but_a_thief_with_a_claim_does() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    c.create_queue(&params("own", 2, 64)).expect("create");
    c.create_queue(&params("steal", 2, 64)).expect("create");
    let me = std::process::id();

    let owner = c.attach_owner("own").expect("owner");
    owner.push(b"left behind").expect("push");
    let e = c.delete_queue("own", true).expect_err("owned by this process");
    assert!(matches!(&e, Error::QueueInUse { queue, .. } if queue == "own"), "{e:?}");
    assert!(e.to_string().contains(&format!("pid {me} (owner of deque 0)")), "{e}");
    assert_eq!(e.code(), Some(ErrorCode::QueueInUse));
    owner.detach().expect("detach");
    // This process lives on, but holds nothing of the queue any more.
    let e = c.delete_queue("own", false).expect_err("a job is left");
    assert!(matches!(e, Error::QueueNotEmpty { .. }), "{e:?}");
    assert_eq!(e.code(), Some(ErrorCode::QueueNotEmpty));
    let done = c.delete_queue("own", true).expect("forced");
    assert_eq!((done.queue.name.as_str(), done.dropped_queued, done.dropped_dead), ("own", 1, 0));
    assert!(matches!(c.delete_queue("own", true), Err(Error::NoSuchQueue(q)) if q == "own"));

    // A thief of another connection holding a claim: named with both.
    let other = d.client();
    let producer = other.attach_injector("steal").expect("injector");
    producer.push(b"job").expect("push");
    let thief = other.attach_thief("steal").expect("thief");
    let job = thief.steal().expect("steal").expect("a job");
    let e = c.delete_queue("steal", true).expect_err("attached, and running a job");
    assert!(e.to_string().contains(&format!("pid {me} (thief, injector, running 1 of its jobs)")), "{e}");
    job.ack().expect("ack");
    let e = c.delete_queue("steal", true).expect_err("still attached");
    assert!(e.to_string().contains(&format!("pid {me} (thief, injector)")), "{e}");

    let report = c.check(false).expect("check");
    assert!(report.is_consistent(), "{:?}", report.problems);
    let names: Vec<String> = c.list_queues().expect("ls").into_iter().map(|q| q.name).collect();
    assert_eq!(names, ["steal"]);
}

#[test]
fn a_delete_a_daemon_crash_interrupted_is_finished_by_the_next_daemon() {
    let mut d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    c.create_queue(&params("half", 2, 64)).expect("create");
    let q = c.list_queues().expect("ls").into_iter().find(|q| q.name == "half").expect("listed");
    {
        let inj = c.attach_injector("half").expect("injector");
        for i in 0..10u8 {
            inj.push(&[i]).expect("push");
        }
    }
    drop(c);
    d.stop();
    // The state a daemon killed just after `ACTIVE -> DELETING` leaves.
    {
        let seg = Segment::attach(&d.segment).expect("attach");
        let off = seg.descriptor().regions.queue_table
            + q.index as u64 * core::mem::size_of::<QueueEntry>() as u64
            + core::mem::offset_of!(QueueEntry, control) as u64;
        let mut f = std::fs::OpenOptions::new().write(true).open(&d.segment).expect("open");
        f.seek(SeekFrom::Start(off)).expect("seek");
        f.write_all(&QUEUE_DELETING.to_le_bytes()).expect("write");
    }
    let mut d2 = Daemon::builder().at(d.dir()).flags(MEDIUM_SEGMENT).start();
    d2.adopt_dir(&mut d);
    let c = d2.client();
    assert!(c.list_queues().expect("ls").is_empty());
    let report = c.check(true).expect("check");
    assert!(report.is_consistent(), "{:?}", report.problems);
    assert_eq!(report.counts.queued, 0, "the half-deleted queue's jobs were dropped");
    assert!(d2.log_text().contains("finished deleting a queue"), "{}", d2.log_text());
    c.create_queue(&params("half", 1, 4)).expect("create again");
    let thief = c.attach_thief("half").expect("thief");
    assert!(thief.steal_wait(Some(Duration::from_millis(50))).expect("steal").is_none(), "empty");
}

#[test]
fn requeuing_a_dead_letter_attaches_the_process_so_no_delete_resets_the_ring_under_it() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    let mut p = params("dl", 1, 64);
    p.max_attempts = 1;
    c.create_queue(&p).expect("create");
    // Pushed, and failed at its only attempt, by another process, which then exits.
    let mut role = spawn_role(module_path!(), "push-and-fail-one", &d.socket, &[]);
    role.finish(Duration::from_secs(20));
    let dead = c.dead_letters("dl").expect("dead letters");
    assert_eq!(dead.len(), 1);
    // This process has attached to nothing yet (listing dead letters reads the segment), so a
    // forced delete would go through now. Re-queuing the dead letter writes the queue's
    // overflow ring, so it attaches `c` as an injector first.
    let me = std::process::id();
    let registered =
        |c: &xtcq_client::Client| c.stats(None).expect("stats").processes.iter().any(|p| p.pid == me);
    assert!(!registered(&c));
    c.requeue_dead("dl", dead[0].handle).expect("requeue");
    assert!(registered(&c));
    let e = d.client().delete_queue("dl", true).expect_err("the re-queuing process is attached");
    assert!(e.to_string().contains(&format!("pid {me} (injector)")), "{e}");
}

/// The entry point of child processes (see `xtcq_testkit::spawn_role`).
#[test]
fn child_main() {
    child_entry(|role| -> Result<(), Error> {
        let c = xtcq_client::Client::connect(None)?;
        match role {
            // Push one job and fail it.
            "push-and-fail-one" => {
                c.attach_injector("dl")?.push(b"fails")?;
                let thief = c.attach_thief("dl")?;
                let job = thief
                    .steal_wait(Some(Duration::from_secs(10)))?
                    .ok_or(Error::Corrupt("no job".into()))?;
                job.fail("boom")?;
                out("failed");
                Ok(())
            }
            other => Err(Error::Corrupt(format!("unknown role {other}"))),
        }
    });
}
