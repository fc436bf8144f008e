//! A hostile attached process writes every process slot of the segment as active, with pid 1
//! (alive forever) and start time 0 (which used to mean "don't check"). Who holds a slot is
//! the daemon's own memory and its private state file, not the segment: new attaches still
//! get a slot (the daemon reclaims the scribbled ones, with a log line), and so they do after
//! a daemon restart, which must not adopt the scribbled slots as live.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use xtcq_client::Client;
use xtcq_proto::{Flavor, QueueParams, ROLE_THIEF};
use xtcq_shm::layout::PROCESS_ACTIVE;
use xtcq_shm::{Segment, SegmentConfig};
use xtcq_testkit::*;
use xtcqd::persistence::state::StateFile;
use xtcqd::registry::{ProcessId, Registry};

#[test]
fn child_main() {
    child_entry(run_role);
}

/// `scribbler`: attaches (as any allowed process may), then writes every process slot of the
/// segment it mapped as active, pid 1, start time 0, and says how many.
fn run_role(role: &str) -> Result<(), xtcq_client::Error> {
    let c = Client::connect(None)?;
    match role {
        "scribbler" => {
            let _t = c.attach_thief("q")?;
            let path = std::env::var("XTCQ_TEST_SEGMENT").expect("segment path");
            let seg = Segment::attach(std::path::Path::new(&path))?;
            out(format_args!("scribbled {}", scribble(&seg)));
            Ok(())
        }
        other => panic!("unknown role {other}"),
    }
}

/// What the hostile process writes: every slot taken by pid 1, start time unknown.
fn scribble(seg: &Segment) -> u32 {
    let n = seg.config().process_slots;
    for i in 0..n {
        let s = seg.process_slot(i).expect("slot");
        s.pid.store(1, Ordering::Relaxed);
        s.uid.store(0, Ordering::Relaxed);
        s.start_time.store(0, Ordering::Relaxed);
        s.role.store(ROLE_THIEF, Ordering::Relaxed);
        s.state.store(PROCESS_ACTIVE, Ordering::Release);
    }
    n
}

fn queue() -> QueueParams {
    QueueParams {
        name: "q".into(),
        deques: 2,
        capacity: 64,
        flavor: Flavor::Fifo,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    }
}

#[test]
fn a_scribbler_that_marks_every_slot_taken_locks_nobody_out_not_even_after_a_restart() {
    let mut d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    d.client().create_queue(&queue()).expect("create");
    let mut s = spawn_role(
        module_path!(),
        "scribbler",
        &d.socket,
        &[("XTCQ_TEST_SEGMENT", d.segment.display().to_string())],
    );
    assert_eq!(s.line(Duration::from_secs(10)), "scribbled 32");
    s.finish(Duration::from_secs(10));

    // Every slot reads "active, pid 1" now; yet attaches get one (more than one, so it is not
    // just the scribbler's own slot, freed when it exited).
    let c = d.client();
    let thief = c.attach_thief("q").expect("a thief attaches although every slot was scribbled");
    let other = d.client();
    let injector = other.attach_injector("q").expect("and a second process slot");
    injector.push(b"job").expect("push");
    assert!(thief.steal().expect("steal").is_some());
    assert!(
        d.log_text().contains("xtcqd registered no process to it"),
        "no log line about the reclaimed slots:\n{}",
        d.log_text()
    );
    drop((thief, injector, c, other));

    // Stopped, scribbled again, restarted: the new daemon adopts none of them.
    d.stop();
    let seg = Segment::attach(&d.segment).expect("map the segment");
    scribble(&seg);
    drop(seg);
    let dir = d.dir().to_path_buf();
    let mut d2 = Daemon::builder().at(&dir).flags(MEDIUM_SEGMENT).start();
    d2.adopt_dir(&mut d);
    let c = d2.client();
    c.attach_thief("q").expect("a thief attaches after the restart");
    d2.client().attach_owner("q").expect("and an owner");
    // (Requests are served only once the segment is adopted, so the log has it now.)
    let log = d2.log_text();
    // The two slots this (live) test process registered before the restart are in the state
    // file, so they are adopted although they were scribbled too; the 30 others are not.
    assert!(log.contains("reclaimed process slots no verifiable process holds reclaimed=30 live=2"), "{log}");
    let me = format!("pid={}", std::process::id());
    for l in log.lines().filter(|l| l.contains("adopted a live attached process")) {
        assert!(l.contains(&me), "adopted a scribbled slot: {l}\n{log}");
    }
}

/// A slot registered without a start time (pid namespaces hide it) cannot be told from a
/// reused pid after a restart: start time 0 does not switch the check off; the slot is
/// reclaimed even though a process with that pid is alive.
#[test]
fn after_a_restart_a_slot_without_a_start_time_is_reclaimed_not_adopted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = SegmentConfig::small()
        .with_deque_capacity(16)
        .with_records(64)
        .with_overflow_capacity(64)
        .with_payload_bytes(16)
        .with_process_slots(4);
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), &cfg, 0o600).expect("segment"));
    let sock = dir.path().join("xtcqd.sock");
    let first = Registry::with_state(seg.clone(), StateFile::beside(&sock).expect("state"));
    first.reset_state();
    let me = std::process::id();
    let verified = ProcessId { pid: me, uid: 0, start_time: 7 };
    let unknown = ProcessId { pid: me, uid: 0, start_time: 0 };
    let a = first.register(verified, ROLE_THIEF, first.keeper()).expect("register");
    let b = first.register(unknown, ROLE_THIEF, first.keeper()).expect("register");
    drop(first);

    // As a starting daemon does before it adopts (the state file is the previous epoch's).
    seg.header_live().daemon_epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    let second = Registry::with_state(seg.clone(), StateFile::beside(&sock).expect("state"));
    let adopted = second.adopt(|_, _| true);
    let slots: Vec<u32> = adopted.iter().map(|x| x.slot.slot).collect();
    assert_eq!(slots, vec![a.slot], "only the slot with a start time is adopted");
    assert_eq!(adopted[0].process, verified);
    let s = seg.process_slot(b.slot).expect("slot");
    assert_eq!(s.state.load(Ordering::Acquire), xtcq_shm::layout::PROCESS_FREE, "slot {b:?} reclaimed");
}
