//! Which descriptor waiters a push wakes: one, not the herd; and when the woken one does not
//! take the job (its loop is busy elsewhere), the daemon's scan wakes another. Real daemon,
//! pushes by a real `xtcq push` process, real `poll(2)` on each waiter's descriptor.

use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags};
use xtcq_client::{Client, QueueParams, ThiefHandle, WakeFd, WakeKind};

use super::wake_kinds;
use xtcq_testkit::{ok, Daemon};

/// Waiters armed at once in the wake-one test.
const WAITERS: usize = 4;

fn params(name: &str) -> QueueParams {
    QueueParams { capacity: 64, ..QueueParams::new(name) }
}

/// Which of `fds` are readable, polling for up to `t` until at least one is.
fn readable_of(fds: &[&WakeFd], t: Duration) -> Vec<usize> {
    let ts = rustix::time::Timespec { tv_sec: t.as_secs() as i64, tv_nsec: t.subsec_nanos() as i64 };
    let mut pfds: Vec<PollFd<'_>> = fds.iter().map(|f| PollFd::new(*f, PollFlags::IN)).collect();
    match poll(&mut pfds, Some(&ts)) {
        Ok(n) if n > 0 => (0..pfds.len()).filter(|&i| pfds[i].revents().contains(PollFlags::IN)).collect(),
        _ => Vec::new(),
    }
}

fn sleepers(d: &Daemon) -> u64 {
    d.stats()["queues"][0]["metrics"]["sleepers"].as_u64().expect("sleepers")
}

/// What a woken waiter does: consumes the readiness, steals the job it was woken for, acks it.
fn take_the_job(t: &ThiefHandle, w: &WakeFd, what: &str) -> Vec<u8> {
    w.clear().expect("clear");
    let j = t.steal_or_arm(w).expect("steal").expect(what);
    let p = j.payload().expect("payload");
    j.ack().expect("ack");
    p
}

/// Attaches `n` thieves of `q`, each with its own descriptor, all armed on an empty queue.
fn armed_waiters(c: &Client, n: usize, kind: WakeKind) -> Vec<(ThiefHandle, WakeFd)> {
    (0..n)
        .map(|_| {
            let t = c.attach_thief("q").expect("thief");
            let w = t.wake_fd_of(kind).expect("a wake descriptor");
            assert!(t.steal_or_arm(&w).expect("steal_or_arm").is_none(), "nothing queued yet");
            (t, w)
        })
        .collect()
}

/// Four waiters armed; each push from another process makes exactly one readable, which
/// takes the job and arms again; the other three stay asleep and counted. Five rounds.
/// The scan is 10 s apart, so no nudge of the daemon's can make a second one readable.
#[test]
fn a_push_wakes_one_descriptor_waiter_not_all() {
    for kind in wake_kinds() {
        a_push_wakes_one(kind);
    }
}

fn a_push_wakes_one(kind: WakeKind) {
    let d = Daemon::builder().flags(["--lease-scan-interval", "10s"]).start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let waiters = armed_waiters(&c, WAITERS, kind);
    let fds: Vec<&WakeFd> = waiters.iter().map(|(_, w)| w).collect();
    assert_eq!(sleepers(&d), WAITERS as u64, "every waiter counted");
    assert!(readable_of(&fds, Duration::from_millis(200)).is_empty(), "readable with nothing pushed");
    for round in 0..5 {
        ok(&d.run(&["push", "q", &format!("job {round}")]));
        let woken = readable_of(&fds, Duration::from_secs(10));
        assert_eq!(woken.len(), 1, "{kind:?} round {round}: one push made {woken:?} readable");
        let (t, w) = &waiters[woken[0]];
        let p = take_the_job(t, w, "the woken waiter finds the job");
        assert_eq!(p, format!("job {round}").as_bytes());
        assert!(t.steal_or_arm(w).expect("arm again").is_none());
        // A herd would have made the others readable by now: the datagram or the futex wake
        // is sent before `xtcq push` exits.
        let others = readable_of(&fds, Duration::from_millis(300));
        assert!(others.is_empty(), "round {round}: others readable after the job was taken: {others:?}");
        assert_eq!(sleepers(&d), WAITERS as u64, "round {round}: every waiter asleep again");
    }
}

/// Two waiters armed, one push: the woken one does not take the job (its loop is busy). With
/// a 1 s scan, the other is not woken at once (the push woke one), but by the daemon's nudge
/// within two scans, and takes the job.
#[test]
fn a_wake_taken_by_a_busy_loop_wakes_another_within_two_scans() {
    for kind in wake_kinds() {
        a_busy_waiter_wakes_another(kind);
    }
}

fn a_busy_waiter_wakes_another(kind: WakeKind) {
    let d = Daemon::builder().flags(["--lease-scan-interval", "1s"]).start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let waiters = armed_waiters(&c, 2, kind);
    let fds: Vec<&WakeFd> = waiters.iter().map(|(_, w)| w).collect();
    ok(&d.run(&["push", "q", "stranded?"]));
    let pushed = Instant::now();
    let woken = readable_of(&fds, Duration::from_secs(10));
    assert_eq!(woken.len(), 1, "one push made {woken:?} readable");
    let other = 1 - woken[0];
    // The busy one is left alone from here: never cleared, never stolen with.
    assert!(
        readable_of(&[fds[other]], Duration::from_millis(300)).is_empty(),
        "the other waiter was woken with the first: a herd, or a nudge before one full scan"
    );
    let nudged = readable_of(&[fds[other]], Duration::from_secs(20));
    assert_eq!(nudged, vec![0], "the other waiter was never woken while the job stayed queued");
    eprintln!("the other waiter was woken {:?} after the push (scans 1 s apart)", pushed.elapsed());
    let (t, w) = &waiters[other];
    assert_eq!(take_the_job(t, w, "the nudged waiter finds the job"), b"stranded?");
    assert_eq!(d.stats()["records"]["queued"].as_u64(), Some(0));
}

/// Two waiters armed, the first stops waiting without a wake (its loop gave up: a dropped
/// future, a timeout): a push then wakes the one still waiting. A futex-kind waiter that left
/// its futex wait queued would take that wake itself (the kernel wakes the first queued),
/// leaving the job to the daemon's nudge; the scan is 10 s apart, so the test would see it.
#[test]
fn a_waiter_that_stopped_waiting_takes_no_wake() {
    for kind in wake_kinds() {
        a_stopped_waiter_takes_no_wake(kind);
    }
}

fn a_stopped_waiter_takes_no_wake(kind: WakeKind) {
    for dropped in [false, true] {
        a_stopped_or_dropped_waiter_takes_no_wake(kind, dropped);
    }
}

/// The first of two waiters stops waiting: disarmed, or its descriptor dropped while armed
/// (the ring's close alone would cancel its wait only later, in the kernel's own time).
fn a_stopped_or_dropped_waiter_takes_no_wake(kind: WakeKind, dropped: bool) {
    let d = Daemon::builder().flags(["--lease-scan-interval", "10s"]).start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let mut waiters = armed_waiters(&c, 2, kind);
    if dropped {
        drop(waiters.remove(0));
    } else {
        waiters[0].1.disarm_and_hand_on();
    }
    // Counted, and not woken: a dropped datagram waiter's release is no wake to hand on.
    assert_eq!(sleepers(&d), 1, "{kind:?}: the waiter left (dropped: {dropped}) is still counted");
    ok(&d.run(&["push", "q", "for the one left"]));
    let (t, w) = waiters.last().expect("the one left");
    let woken = readable_of(&[w], Duration::from_secs(5));
    assert_eq!(
        woken,
        vec![0],
        "{kind:?} (dropped: {dropped}): the push did not wake the waiter still waiting"
    );
    take_the_job(t, w, "the job");
}

/// An attached process zeroes the queue's sleeper count while a waiter sleeps (garbage in
/// shared memory): a push then sees nobody to wake. The daemon's nudge (scans 100 ms apart)
/// must still wake the waiter while the job stays queued: the count is not trusted to be
/// high enough.
#[test]
fn a_zeroed_sleeper_count_leaves_the_waiter_to_the_nudge() {
    for kind in wake_kinds() {
        a_zeroed_count_is_nudged(kind);
    }
}

fn a_zeroed_count_is_nudged(kind: WakeKind) {
    let d = Daemon::start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let waiters = armed_waiters(&c, 1, kind);
    let (t, w) = &waiters[0];
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("segment");
    let q = seg.queue_by_name("q").expect("queue").index;
    seg.wait_word(q).expect("wait word").sleepers.store(0, std::sync::atomic::Ordering::SeqCst);
    ok(&d.run(&["push", "q", "under garbage"]));
    let woken = readable_of(&[w], Duration::from_secs(10));
    assert_eq!(woken, vec![0], "{kind:?}: a waiter hidden by a zeroed count was never woken");
    take_the_job(t, w, "the job");
}

/// A waiter stopped (SIGSTOP, Ctrl-Z) before the push that wakes it: the first waiter queued
/// takes the push's wake and never reads it; the daemon's nudge (scans 100 ms apart) wakes
/// the other one while the job stays queued.
#[test]
fn a_stopped_woken_waiter_has_another_woken_within_two_scans() {
    for kind in wake_kinds() {
        a_stopped_woken_waiter(kind);
    }
}

fn a_stopped_woken_waiter(kind: WakeKind) {
    let d = Daemon::start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let way = if kind == WakeKind::Futex { "futex" } else { "datagram" };
    let mut child = super::wake_fd::spawn_asleep(&d, way);
    // Armed after the child: the kernel's futex queue wakes the child first.
    let waiters = armed_waiters(&c, 1, kind);
    let (t, w) = &waiters[0];
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) };
    ok(&d.run(&["push", "q", "past the stopped one"]));
    let woken = readable_of(&[w], Duration::from_secs(10));
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert_eq!(woken, vec![0], "{kind:?}: the waiter left running was never woken");
    take_the_job(t, w, "the job");
}

/// Futex-kind and datagram waiters of a paused queue: a push wakes nobody (the queue is
/// closed), and the resume wakes them.
#[test]
fn a_resume_wakes_the_waiters_of_a_paused_queue() {
    for kind in wake_kinds() {
        let d = Daemon::builder().flags(["--lease-scan-interval", "10s"]).start();
        let c = d.client();
        c.create_queue(&params("q")).expect("create");
        ok(&d.run(&["pause", "q"]));
        let waiters = armed_waiters(&c, 2, kind);
        let fds: Vec<&WakeFd> = waiters.iter().map(|(_, w)| w).collect();
        ok(&d.run(&["push", "q", "held"]));
        ok(&d.run(&["resume", "q"]));
        let woken = readable_of(&fds, Duration::from_secs(10));
        assert!(!woken.is_empty(), "{kind:?}: the resume woke nobody");
        let (t, w) = &waiters[woken[0]];
        take_the_job(t, w, "the job");
    }
}

/// A waiter of a queue out of rate tokens (1 a second, burst 1): the push cannot be taken
/// yet, and no event announces the next token; the descriptor's timer makes it readable
/// when the token is due, and the job is taken. (Scans 10 s apart: no nudge helps.)
#[test]
fn a_rate_limited_waiter_is_woken_when_a_token_is_due() {
    for kind in wake_kinds() {
        let d = Daemon::builder().flags(["--lease-scan-interval", "10s"]).start();
        let c = d.client();
        c.create_queue(&params("q")).expect("create");
        ok(&d.run(&["limits", "q", "--max-rate", "1/s", "--burst", "1"]));
        ok(&d.run(&["push", "q", "first"]));
        let waiters = armed_waiters_after_one(&c, kind);
        let (t, w) = &waiters;
        ok(&d.run(&["push", "q", "second"]));
        let start = Instant::now();
        let mut got = None;
        while got.is_none() && start.elapsed() < Duration::from_secs(10) {
            if readable_of(&[w], Duration::from_secs(10)).is_empty() {
                break;
            }
            w.clear().expect("clear");
            got = t.steal_or_arm(w).expect("steal");
        }
        let j = got.unwrap_or_else(|| panic!("{kind:?}: the second job was not taken within 10 s"));
        assert_eq!(j.payload().expect("payload"), b"second");
        j.ack().expect("ack");
    }
}

/// A thief that took the queue's one token (the job "first") and then armed.
fn armed_waiters_after_one(c: &Client, kind: WakeKind) -> (ThiefHandle, WakeFd) {
    let t = c.attach_thief("q").expect("thief");
    let w = t.wake_fd_of(kind).expect("a wake descriptor");
    t.steal_or_arm(&w).expect("steal").expect("the first job").ack().expect("ack");
    assert!(t.steal_or_arm(&w).expect("arm").is_none(), "nothing queued yet");
    (t, w)
}

/// An attached process sets every armed bit and moves the futex word while a waiter sleeps
/// (garbage in shared memory): pushes still reach the waiter (a producer claims the garbage
/// bits, finds no socket behind them, and wakes a futex sleeper; a moved word is a spurious
/// readiness), nothing panics, and two rounds of jobs are taken.
#[test]
fn scribbled_armed_bits_and_futex_word_lose_no_job() {
    for kind in wake_kinds() {
        let d = Daemon::start();
        let c = d.client();
        c.create_queue(&params("q")).expect("create");
        let waiters = armed_waiters(&c, 1, kind);
        let (t, w) = &waiters[0];
        let seg = xtcq_shm::Segment::attach(&d.segment).expect("segment");
        let q = seg.queue_by_name("q").expect("queue").index;
        let word = seg.wait_word(q).expect("wait word");
        for round in 0..2 {
            for a in &word.armed {
                a.store(u64::MAX, std::sync::atomic::Ordering::SeqCst);
            }
            word.seq.fetch_add(0x5555, std::sync::atomic::Ordering::SeqCst);
            ok(&d.run(&["push", "q", &format!("round {round}")]));
            let mut got = None;
            for _ in 0..100 {
                if readable_of(&[w], Duration::from_secs(10)).is_empty() {
                    break;
                }
                w.clear().expect("clear");
                got = t.steal_or_arm(w).expect("steal");
                if got.is_some() {
                    break;
                }
            }
            let j = got.unwrap_or_else(|| panic!("{kind:?} round {round}: the job never reached the waiter"));
            j.ack().expect("ack");
            assert!(t.steal_or_arm(w).expect("arm again").is_none());
        }
        assert_eq!(d.stats()["records"]["queued"].as_u64(), Some(0), "{kind:?}: the daemon lives on");
    }
}
