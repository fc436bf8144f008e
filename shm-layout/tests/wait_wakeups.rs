//! Sleeping consumers and the pushes that wake them (`wait`): each job wakes one sleeper and
//! none is lost, however many sleep; a push with nobody asleep leaves the futex word alone
//! (the no-system-call path). Every wait is bounded: a lost wake-up fails the test by its
//! timeout instead of hanging it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use xtcq_shm::{Flavor, Owner, QueueSpec, Segment, SegmentConfig, Thief};

const SLEEPERS: u32 = 4;

fn setup() -> (tempfile::TempDir, Arc<Segment>, xtcq_shm::QueueInfo) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = SegmentConfig::small()
        .with_deque_capacity(64)
        .with_queues(1, 2)
        .with_records(1024)
        .with_overflow_capacity(1024)
        .with_payload_bytes(16)
        .with_process_slots(16);
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), &cfg, 0o600).expect("create"));
    let spec = QueueSpec {
        name: "w".into(),
        flavor: Flavor::Fifo,
        deques: 2,
        capacity: 64,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    };
    let q = seg.create_queue(&spec).expect("queue");
    (dir, seg, q)
}

/// Waits until `n` consumers are counted as sleepers.
fn until_sleeping(seg: &Segment, q: u32, n: u32) {
    let w = seg.wait_word(q).expect("wait word");
    let deadline = Instant::now() + Duration::from_secs(10);
    while w.sleepers.load(Ordering::SeqCst) < n {
        assert!(Instant::now() < deadline, "consumers did not go to sleep");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn each_job_wakes_a_sleeper_and_none_is_left_asleep() {
    let (_dir, seg, q) = setup();
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    for round in 0..20 {
        let got = std::thread::scope(|s| {
            let sleepers: Vec<_> = (0..SLEEPERS)
                .map(|k| {
                    let seg = seg.clone();
                    let q = q.clone();
                    s.spawn(move || {
                        let thief = Thief::new(seg, &q, 1 + k).expect("thief");
                        let t0 = Instant::now();
                        // Far longer than the test: a sleeper never woken fails below.
                        let job =
                            thief.steal_wait(Some(Instant::now() + Duration::from_secs(10))).expect("wait");
                        let waited = t0.elapsed();
                        let id = job.map(|j| {
                            let p = j.payload().expect("payload");
                            j.ack().expect("ack");
                            u32::from_le_bytes(p[..4].try_into().expect("4 bytes"))
                        });
                        (id, waited)
                    })
                })
                .collect();
            until_sleeping(&seg, q.index, SLEEPERS);
            // One job per sleeper, one at a time: with a wake-one futex each must reach a
            // different sleeper (or one still on its way to sleep).
            for i in 0..SLEEPERS {
                owner.push(&(round * 100 + i).to_le_bytes()).expect("push");
                if round % 2 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            sleepers.into_iter().map(|h| h.join().expect("sleeper")).collect::<Vec<_>>()
        });
        let mut ids: Vec<u32> = got
            .iter()
            .map(|(id, waited)| {
                id.unwrap_or_else(|| {
                    panic!("round {round}: a sleeper timed out after {waited:?} (lost wake-up)")
                })
            })
            .collect();
        for (_, waited) in &got {
            assert!(*waited < Duration::from_secs(5), "round {round}: woken only after {waited:?}");
        }
        ids.sort_unstable();
        assert_eq!(ids, (0..SLEEPERS).map(|i| round * 100 + i).collect::<Vec<_>>(), "round {round}");
    }
}

#[test]
fn a_push_with_nobody_asleep_leaves_the_futex_word_alone() {
    let (_dir, seg, q) = setup();
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    let w = seg.wait_word(q.index).expect("wait word");
    let before = w.seq.load(Ordering::SeqCst);
    for i in 0..100u32 {
        owner.push(&i.to_le_bytes()).expect("push");
    }
    assert_eq!(w.seq.load(Ordering::SeqCst), before, "no sleeper: no bump, no FUTEX_WAKE");
    // With a sleeper, a push bumps it (and wakes it).
    let thief = Thief::new(seg.clone(), &q, 1).expect("thief");
    while let Some(j) = thief.steal().expect("steal") {
        j.ack().expect("ack");
    }
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            thief.steal_wait(Some(Instant::now() + Duration::from_secs(10))).expect("wait").is_some()
        });
        until_sleeping(&seg, q.index, 1);
        owner.push(b"wake").expect("push");
        assert!(h.join().expect("sleeper"), "woken with the job");
    });
    assert_ne!(w.seq.load(Ordering::SeqCst), before);
}

/// While a consumer searches, a push wakes no sleeper (the searcher will find the job: no
/// system call, no second consumer racing for `top`); once nobody searches, it does. The
/// searcher and the sleeper are counted by hand, so that no timing decides what the push saw.
#[test]
fn a_push_while_a_consumer_searches_wakes_no_sleeper() {
    let (_dir, seg, q) = setup();
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    let w = seg.wait_word(q.index).expect("wait word");
    let waker = seg.waker(q.index).expect("waker");
    let sleep = waker.sleep_begins();
    assert!(w.searchers().begin(1), "the first searcher is let in");
    assert!(!w.searchers().begin(1), "a second one is over the bound of one");
    let before = w.seq.load(Ordering::SeqCst);
    owner.push(b"one").expect("push");
    assert_eq!(w.seq.load(Ordering::SeqCst), before, "a searcher is counted: no wake");
    assert!(w.searchers().end(), "the only searcher was the last");
    assert!(!w.searchers().end(), "never below zero");
    assert_eq!(w.searching.load(Ordering::SeqCst), 0);
    owner.push(b"two").expect("push");
    assert_ne!(w.seq.load(Ordering::SeqCst), before, "nobody searches: the sleeper is woken");
    waker.sleep_ends(sleep);
}

/// Stress: consumer threads in `steal_wait` loops (searching, sleeping, woken one at a time)
/// against a producer pushing bursts with pauses between: every job is taken exactly once,
/// and no searcher is left counted when they are done.
#[test]
fn bursts_to_waiting_consumers_are_each_taken_once() {
    const CONSUMERS: u32 = 6;
    const JOBS: u32 = 4000;
    let (_dir, seg, q) = setup();
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let taken: Vec<u32> = std::thread::scope(|s| {
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|k| {
                let (seg, q, stop) = (seg.clone(), q.clone(), &stop);
                s.spawn(move || {
                    let thief = Thief::new(seg, &q, 1 + k).expect("thief");
                    let mut got = Vec::new();
                    loop {
                        let deadline = Instant::now() + Duration::from_millis(20);
                        match thief.steal_wait(Some(deadline)).expect("wait") {
                            Some(j) => {
                                got.push(u32::from_le_bytes(
                                    j.payload().expect("payload")[..4].try_into().expect("4"),
                                ));
                                j.ack().expect("ack");
                            }
                            None if stop.load(Ordering::Acquire) => return got,
                            None => {}
                        }
                    }
                })
            })
            .collect();
        let mut i = 0;
        while i < JOBS {
            // Bursts of 1 to 16, then a pause long enough for the consumers to go to sleep.
            for _ in 0..(i % 16 + 1).min(JOBS - i) {
                while owner.push(&i.to_le_bytes()).is_err() {
                    std::thread::yield_now();
                }
                i += 1;
            }
            std::thread::sleep(Duration::from_micros(if i % 3 == 0 { 200 } else { 5 }));
        }
        let thief = Thief::new(seg.clone(), &q, 15).expect("thief");
        while !thief.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Release);
        consumers.into_iter().flat_map(|h| h.join().expect("consumer")).collect()
    });
    let mut sorted = taken.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), taken.len(), "a job taken twice");
    assert_eq!(sorted, (0..JOBS).collect::<Vec<_>>(), "a job never taken");
    assert_eq!(
        seg.wait_word(q.index).expect("wait word").searching.load(Ordering::SeqCst),
        0,
        "a searcher left counted"
    );
}

/// A consumer that searches a paused queue holding jobs goes to sleep, as before searchers: the
/// last searcher searches again only for jobs it could take now (it would spin for as long as
/// the pause lasted), and the resume wakes it for them.
#[test]
fn a_searcher_sleeps_on_a_paused_queue_with_jobs_and_the_resume_wakes_it() {
    let (_dir, seg, q) = setup();
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    owner.push(b"held").expect("push");
    seg.set_paused(q.index, true);
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let thief = Thief::new(seg.clone(), &q, 1).expect("thief");
            // A deadline only so that a searcher that never sleeps fails the test instead of
            // hanging it (`until_sleeping` gives up first).
            let deadline = Instant::now() + Duration::from_secs(30);
            let job = thief.steal_wait(Some(deadline)).expect("wait").expect("the job, after the resume");
            job.ack().expect("ack");
        });
        until_sleeping(&seg, q.index, 1);
        seg.set_paused(q.index, false);
        h.join().expect("consumer");
    });
    assert_eq!(seg.wait_word(q.index).expect("wait word").searching.load(Ordering::SeqCst), 0);
}

/// Garbage in `searching` (a huge count an attached process wrote, no searcher behind it)
/// makes every push skip its wake: nobody is searching to take the job. The daemon's nudge
/// (sent when jobs outlast two scans) must wake a sleeper *and* bring the count back, or
/// every later push skips its wake too and each job waits for a nudge or a sleeper's slice.
/// Counted by hand, as above, so that no timing decides what a push saw.
#[test]
fn a_nudge_clears_a_garbage_searcher_count_so_pushes_wake_again() {
    let (_dir, seg, q) = setup();
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    let w = seg.wait_word(q.index).expect("wait word");
    let waker = seg.waker(q.index).expect("waker");
    let sleep = waker.sleep_begins();
    w.searching.store(u32::MAX, Ordering::SeqCst);
    let before = w.seq.load(Ordering::SeqCst);
    owner.push(b"one").expect("push");
    assert_eq!(w.seq.load(Ordering::SeqCst), before, "the garbage count reads as a searcher");
    xtcq_shm::wait::nudge_stranded(waker);
    let nudged = w.seq.load(Ordering::SeqCst);
    assert_ne!(nudged, before, "the nudge wakes a sleeper whatever the count says");
    assert_eq!(w.searching.load(Ordering::SeqCst), 0, "the nudge leaves no garbage count behind");
    owner.push(b"two").expect("push");
    assert_ne!(w.seq.load(Ordering::SeqCst), nudged, "nobody searches: the next push wakes the sleeper");
    waker.sleep_ends(sleep);
}

/// A concurrency-limited queue at its limit, a searcher and a sleeper: a push while the
/// searcher is counted skips its wake; the searcher, last and finding the queue closed,
/// leaves to sleep instead of searching again; so the ack that frees the running slot must
/// wake the sleeper for the job left waiting. Counted by hand, so that no timing decides.
#[test]
fn an_ack_that_frees_a_running_slot_wakes_a_sleeper_a_searcher_left() {
    let (_dir, seg, q) = setup();
    seg.set_max_running(q.index, 1);
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    let thief = Thief::new(seg.clone(), &q, 1).expect("thief");
    let w = seg.wait_word(q.index).expect("wait word");
    let waker = seg.waker(q.index).expect("waker");
    owner.push(b"running").expect("push");
    let running = thief.steal().expect("steal").expect("the first job");
    assert!(waker.closed(), "at its limit of one");
    let sleep = waker.sleep_begins();
    assert!(w.searchers().begin(1), "a searcher");
    let before = w.seq.load(Ordering::SeqCst);
    owner.push(b"waiting").expect("push");
    assert_eq!(w.seq.load(Ordering::SeqCst), before, "a searcher is counted: no wake");
    assert!(thief.steal().expect("steal").is_none(), "closed: the searcher finds nothing");
    assert!(w.searchers().end(), "the last searcher");
    assert!(waker.closed(), "still closed: it sleeps rather than search again");
    running.ack().expect("ack");
    assert_ne!(w.seq.load(Ordering::SeqCst), before, "the freed slot wakes the sleeper");
    waker.sleep_ends(sleep);
    let job = thief.steal().expect("steal").expect("the waiting job");
    assert_eq!(job.payload().expect("payload"), b"waiting");
    job.ack().expect("ack");
}

/// A paused queue with garbage in `searching` (a huge count no searcher is behind): the
/// resume must wake the sleeper whatever the count says, or the job pushed during the pause
/// waits for the daemon's nudge. Counted by hand, so that no timing decides.
#[test]
fn a_resume_wakes_a_sleeper_beside_a_garbage_searcher_count() {
    let (_dir, seg, q) = setup();
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    let w = seg.wait_word(q.index).expect("wait word");
    let waker = seg.waker(q.index).expect("waker");
    let sleep = waker.sleep_begins();
    w.searching.store(u32::MAX, Ordering::SeqCst);
    seg.set_paused(q.index, true);
    let before = w.seq.load(Ordering::SeqCst);
    owner.push(b"held").expect("push");
    assert_eq!(w.seq.load(Ordering::SeqCst), before, "paused: no wake");
    seg.set_paused(q.index, false);
    assert_ne!(w.seq.load(Ordering::SeqCst), before, "the resume wakes the sleeper");
    waker.sleep_ends(sleep);
}
