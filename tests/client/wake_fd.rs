//! Waiting for work from an event loop: a thief's wake descriptor (`ThiefHandle::wake_fd`),
//! polled as epoll, libuv, tokio or PostgreSQL's `WaitEventSet` would. Real daemon, real
//! producer processes (`xtcq push`), real `poll(2)`.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags};
use xtcq_client::{Client, Error, QueueParams, ThiefHandle, WakeFd, WakeKind};

use super::wake_kinds;
use xtcq_testkit::*;

fn params(name: &str) -> QueueParams {
    QueueParams { capacity: 64, ..QueueParams::new(name) }
}

/// Polls `fd` for up to `t`; whether it became readable.
fn readable(fd: &impl AsFd, t: Duration) -> bool {
    let ts = rustix::time::Timespec { tv_sec: t.as_secs() as i64, tv_nsec: t.subsec_nanos() as i64 };
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    matches!(poll(&mut fds, Some(&ts)), Ok(n) if n > 0)
}

/// An event loop's take of one job: steal or arm, poll, clear, again; gives up after `limit`
/// without a wake (a lost wake-up, when a job was pushed).
fn take_one<'a>(t: &'a ThiefHandle, w: &WakeFd, limit: Duration) -> Option<(xtcq_client::Job<'a>, u32)> {
    let mut polls = 0;
    loop {
        if let Some(j) = t.steal_or_arm(w).expect("steal_or_arm") {
            return Some((j, polls));
        }
        if !readable(w, limit) {
            return None;
        }
        polls += 1;
        w.clear().expect("clear");
    }
}

/// A consumer armed on its descriptor is woken by a push from another process, and sleeps
/// (not readable) while there is nothing.
#[test]
fn a_push_from_another_process_wakes_the_descriptor() {
    for kind in wake_kinds() {
        a_push_from_another_process_wakes(kind);
    }
}

fn a_push_from_another_process_wakes(kind: WakeKind) {
    let d = Daemon::start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let t = c.attach_thief("q").expect("thief");
    let w = t.wake_fd_of(kind).expect("a wake descriptor");
    assert_eq!(w.kind(), kind);
    assert!(t.steal_or_arm(&w).expect("steal_or_arm").is_none(), "nothing queued yet");
    assert!(!readable(&w, Duration::from_millis(200)), "readable with nothing pushed");
    ok(&d.run(&["push", "q", "hello"]));
    assert!(readable(&w, Duration::from_secs(10)), "the push did not wake the descriptor");
    w.clear().expect("clear");
    let (j, _) = take_one(&t, &w, Duration::from_secs(10)).expect("the job");
    assert_eq!(j.payload().expect("payload"), b"hello");
    j.ack().expect("ack");
}

/// The daemon killed while a consumer waits: the descriptor becomes readable, and `clear`
/// says the daemon is gone (an event loop notices instead of sleeping forever).
#[test]
fn the_daemon_going_away_makes_the_descriptor_readable() {
    for kind in wake_kinds() {
        the_daemon_going_away_wakes(kind);
    }
}

fn the_daemon_going_away_wakes(kind: WakeKind) {
    let mut d = Daemon::start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let t = c.attach_thief("q").expect("thief");
    let w = t.wake_fd_of(kind).expect("a wake descriptor");
    assert!(t.steal_or_arm(&w).expect("steal_or_arm").is_none());
    d.kill();
    assert!(readable(&w, Duration::from_secs(10)), "the daemon's death did not make it readable");
    assert!(matches!(w.clear(), Err(Error::DaemonLost { .. })), "clear must say the daemon is gone");
}

/// The daemon killed -9 and started again while a consumer waits: the old descriptor is
/// readable and its next steal says the daemon is gone; the same thief's new descriptor then
/// sleeps on the restarted daemon's queue and a push wakes it (the C API's loop: after
/// `XTCQ_E_UNREACHABLE`, `xtcq_thief_wait_fd` on the same thief).
#[test]
fn a_restarted_daemon_is_waited_for_with_a_new_descriptor() {
    for kind in wake_kinds() {
        let mut d = Daemon::start();
        let c = d.client();
        c.create_queue(&params("q")).expect("create");
        let t = c.attach_thief("q").expect("thief");
        let w = t.wake_fd_of(kind).expect("a wake descriptor");
        assert!(t.steal_or_arm(&w).expect("steal_or_arm").is_none());
        d.kill();
        d.restart_with(xtcq_testkit::sizes::SMALL_SEGMENT, |_| {});
        assert!(readable(&w, Duration::from_secs(10)), "{kind:?}: the restart did not make it readable");
        let lost = t.steal_or_arm(&w);
        assert!(matches!(lost, Err(Error::DaemonLost { .. })), "{kind:?}: {lost:?}");
        drop(w);
        let w = t.wake_fd_of(kind).expect("a new wake descriptor");
        let armed = t.steal_or_arm(&w);
        assert!(matches!(armed, Ok(None)), "{kind:?}: the new descriptor: {armed:?}");
        ok(&d.run(&["push", "q", "after"]));
        assert!(readable(&w, Duration::from_secs(10)), "{kind:?}: a push after the restart woke nobody");
        let (j, _) = take_one(&t, &w, Duration::from_secs(10)).expect("the job");
        j.ack().expect("ack");
    }
}

/// 4 consumer threads, each its own descriptor and event loop, 400 jobs pushed by other
/// processes at random gaps (some while everyone sleeps): every job is taken once, and no
/// consumer ever waited 3 s for a wake while a job was queued (a lost wake-up).
#[test]
fn sleeping_descriptor_waiters_lose_no_wake() {
    for kind in wake_kinds() {
        sleeping_waiters_lose_no_wake(kind);
    }
}

fn sleeping_waiters_lose_no_wake(kind: WakeKind) {
    let d = Daemon::start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let total = 400;
    let taken = std::sync::Mutex::new(Vec::new());
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let c = Client::connect(Some(&d.socket)).expect("connect");
                let t = c.attach_thief("q").expect("thief");
                let w = t.wake_fd_of(kind).expect("wake");
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    match take_one(&t, &w, Duration::from_secs(3)) {
                        Some((j, _)) => {
                            let p = String::from_utf8(j.payload().expect("payload")).expect("utf8");
                            j.ack().expect("ack");
                            let mut v = taken.lock().unwrap();
                            v.push(p);
                            if v.len() == total {
                                done.store(true, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                        None => {
                            let queued = d.stats()["records"]["queued"].as_u64().unwrap_or(0);
                            assert_eq!(
                                queued, 0,
                                "{kind:?}: a consumer waited 3 s without a wake while {queued} jobs were queued"
                            );
                        }
                    }
                }
            });
        }
        let mut rng = Rng::new(7);
        let start = Instant::now();
        let mut i = 0;
        while i < total {
            let n = (rng.below(8) + 1).min((total - i) as u64) as usize;
            let batch: String = (i..i + n).map(|k| format!("job {k}\n")).collect();
            ok(&d.run_in(&["push", "q"], batch.as_bytes()));
            i += n;
            std::thread::sleep(Duration::from_micros(rng.below(30_000)));
        }
        let deadline = start + Duration::from_secs(120);
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            assert!(Instant::now() < deadline, "jobs not all taken: {}", taken.lock().unwrap().len());
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let mut got = taken.into_inner().unwrap();
    got.sort();
    got.dedup();
    assert_eq!(got.len(), total, "every job taken once");
}

/// In a child forked after the descriptor was made, it is refused like any inherited handle,
/// and the parent's waiter goes on.
#[test]
fn an_inherited_descriptor_is_refused_in_the_child() {
    for kind in wake_kinds() {
        an_inherited_descriptor_is_refused(kind);
    }
}

fn an_inherited_descriptor_is_refused(kind: WakeKind) {
    let d = Daemon::start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let t = c.attach_thief("q").expect("thief");
    let w = t.wake_fd_of(kind).expect("wake");
    let pid = fork_child(|| match (w.clear(), t.steal_or_arm(&w)) {
        (Err(Error::Forked), Err(Error::Forked)) => 0,
        _ => 1,
    });
    assert_eq!(wait_forked(pid), 0, "the child was not refused");
    assert!(t.steal_or_arm(&w).expect("the parent goes on").is_none());
    ok(&d.run(&["push", "q", "x"]));
    assert!(take_one(&t, &w, Duration::from_secs(10)).is_some(), "the parent's waiter still wakes");
}

/// A parent armed when it forks: the child's calls on the inherited descriptor (a steal, a
/// cancel, as a forked worker's loop or a tokio guard would make) are refused and touch
/// nothing of the parent's waiter: it stays counted, its futex wait stays queued, and a push
/// still wakes it. (The scan is 10 s apart: no nudge of the daemon's rescues a lost wake.)
#[test]
fn a_child_of_an_armed_waiter_leaves_its_wait_alone() {
    for kind in wake_kinds() {
        a_child_leaves_the_wait_alone(kind);
    }
}

fn a_child_leaves_the_wait_alone(kind: WakeKind) {
    let d = Daemon::builder().flags(["--lease-scan-interval", "10s"]).start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let t = c.attach_thief("q").expect("thief");
    let w = t.wake_fd_of(kind).expect("wake");
    assert!(t.steal_or_arm(&w).expect("arm").is_none());
    let pid = fork_child(|| {
        w.disarm_and_hand_on();
        match t.steal_or_arm(&w) {
            Err(Error::Forked) => 0,
            _ => 1,
        }
    });
    assert_eq!(wait_forked(pid), 0, "the child was not refused");
    let sleepers = d.stats()["queues"][0]["metrics"]["sleepers"].as_u64();
    // Two rounds: the first wake may come from the child's meddling (a spurious one).
    for round in 0..2 {
        if round > 0 {
            assert!(t.steal_or_arm(&w).expect("arm").is_none());
        }
        ok(&d.run(&["push", "q", "x"]));
        let woken = readable(&w, Duration::from_secs(10));
        assert!(woken, "{kind:?} round {round}: the push did not wake the parent (sleepers after the child: {sleepers:?})");
        let (j, _) = take_one(&t, &w, Duration::from_secs(10)).expect("the parent's job");
        j.ack().expect("ack");
    }
    assert_eq!(sleepers, Some(1), "{kind:?}: the child took the parent's waiter off the count");
}

/// The role for [`refused_io_uring_falls_back_or_says_why`]: asks queue `q`'s thief for a wake
/// descriptor as `XTCQ_WAKE_FD` says and reports what it got.
#[test]
fn no_uring_role_main() {
    let Ok(socket) = std::env::var("XTCQ_TEST_NO_URING_SOCKET") else { return };
    let c = Client::connect(Some(std::path::Path::new(&socket))).expect("connect");
    let t = c.attach_thief("q").expect("thief");
    match t.wake_fd() {
        Ok(w) => println!("@@ kind {:?}", w.kind()),
        Err(e) => println!("@@ error {e}"),
    }
}

/// Refuses `io_uring_setup(2)` with `EPERM` from here on, as `kernel.io_uring_disabled=2` or
/// a container's seccomp profile does (for this process alone: no machine-wide setting).
fn refuse_io_uring() -> std::io::Result<()> {
    const LD_NR: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS, offset 0: the syscall number
    const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET: u16 = 0x06; // BPF_RET | BPF_K
    let f = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let prog = [
        f(LD_NR, 0, 0, 0),
        f(JEQ, 0, 1, libc::SYS_io_uring_setup as u32),
        f(RET, 0, 0, 0x0005_0000 | libc::EPERM as u32), // SECCOMP_RET_ERRNO
        f(RET, 0, 0, 0x7fff_0000),                      // SECCOMP_RET_ALLOW
    ];
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr() as *mut _ };
    // SAFETY: prctl with a filter program that lives through the call.
    let rc = unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            -1
        } else {
            libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &fprog as *const libc::sock_fprog)
        }
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A consumer where io_uring is refused: `XTCQ_WAKE_FD=auto` gets the datagram kind, and
/// `XTCQ_WAKE_FD=futex` an error that says io_uring is refused and what to do, not a bare
/// "Operation not permitted".
#[test]
fn refused_io_uring_falls_back_or_says_why() {
    use std::os::unix::process::CommandExt;
    let d = Daemon::start();
    d.client().create_queue(&params("q")).expect("create");
    for (pick, want) in [("auto", "@@ kind Datagram"), ("futex", "@@ error")] {
        let mut cmd = std::process::Command::new(std::env::current_exe().expect("exe"));
        cmd.args(["--exact", &test_name(module_path!(), "no_uring_role_main"), "--nocapture"])
            .env("XTCQ_TEST_NO_URING_SOCKET", &d.socket)
            .env("XTCQ_WAKE_FD", pick);
        // SAFETY: prctl only, between fork and exec.
        unsafe { cmd.pre_exec(refuse_io_uring) };
        let out = cmd.output().expect("run the role");
        let said = String::from_utf8_lossy(&out.stdout);
        let line = said.lines().find(|l| l.starts_with("@@")).unwrap_or_default().to_string();
        assert!(line.starts_with(want), "XTCQ_WAKE_FD={pick}: {line:?}");
        if pick == "futex" {
            assert!(line.contains("io_uring") && line.contains("datagram"), "not a clear error: {line:?}");
        }
    }
}

/// The role for [`failed_descriptors_under_a_low_fd_limit_hold_no_waiter`]: with no fd
/// left to it, then two, asks for datagram descriptors 300 times each (all fail), then, the
/// limit restored, once more.
#[test]
fn low_nofile_role_main() {
    let Ok(socket) = std::env::var("XTCQ_TEST_LOW_NOFILE_SOCKET") else { return };
    let c = Client::connect(Some(std::path::Path::new(&socket))).expect("connect");
    let t = c.attach_thief("q").expect("thief");
    let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let old = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    // No fd free (the daemon's socket is dropped on its way in), then two (the socket and
    // the control connection's copy fit, the epoll does not).
    for free in [0, 2] {
        let limit = (0..).filter(|n| !open.contains(n)).nth(free).expect("a limit");
        let low = rustix::process::Rlimit { current: Some(limit as u64), maximum: old.maximum };
        rustix::process::setrlimit(rustix::process::Resource::Nofile, low).expect("setrlimit");
        let failed = (0..300).filter(|_| t.wake_fd_of(WakeKind::Datagram).is_err()).count();
        rustix::process::setrlimit(rustix::process::Resource::Nofile, old).expect("setrlimit back");
        println!("@@ failed {failed}");
    }
    match t.wake_fd_of(WakeKind::Datagram) {
        Ok(_) => println!("@@ then ok"),
        Err(e) => println!("@@ then error {e}"),
    }
}

/// A consumer short of fds (`ulimit -n`) asks for datagram descriptors again and again and
/// each attempt fails after the daemon bound its socket: the failures must give the waiter
/// back, or 256 of them use up the queue's room for datagram waiters (for every process of
/// the queue) until this one exits.
#[test]
fn failed_descriptors_under_a_low_fd_limit_hold_no_waiter() {
    let d = Daemon::start();
    d.client().create_queue(&params("q")).expect("create");
    let out = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", &test_name(module_path!(), "low_nofile_role_main"), "--nocapture"])
        .env("XTCQ_TEST_LOW_NOFILE_SOCKET", &d.socket)
        .output()
        .expect("run the role");
    let said = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = said.lines().filter(|l| l.starts_with("@@")).collect();
    assert_eq!(lines, ["@@ failed 300", "@@ failed 300", "@@ then ok"], "{said}");
}

/// What the thread that armed does while another thread waits on the descriptor (a tokio
/// task armed on one worker and polled from another).
#[derive(Clone, Copy, Debug)]
enum ArmerThen {
    /// Parked in a futex (a worker idle on its condvar).
    Parked,
    /// Spinning in user space, never entering the kernel (a worker running a long job).
    Spinning,
    /// Exited.
    Exited,
}

/// A waiter armed by one thread and waited on by another: for the futex kind the ring's
/// completion is posted by the thread that armed (io_uring's task work), whatever it is
/// doing then. The push still makes the descriptor readable for the thread polling it, and
/// that thread takes the job.
#[test]
fn a_waiter_armed_on_one_thread_is_woken_on_another() {
    for kind in wake_kinds() {
        for then in [ArmerThen::Parked, ArmerThen::Spinning, ArmerThen::Exited] {
            armed_on_one_thread_woken_on_another(kind, then);
        }
    }
}

fn armed_on_one_thread_woken_on_another(kind: WakeKind, then: ArmerThen) {
    let d = Daemon::start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let t = c.attach_thief("q").expect("thief");
    let w = t.wake_fd_of(kind).expect("wake");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (armed_tx, armed_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (t, w, stop) = (&t, &w, &stop);
        let armer = s.spawn(move || {
            assert!(t.steal_or_arm(w).expect("arm").is_none());
            armed_tx.send(()).expect("send");
            match then {
                ArmerThen::Parked => drop(stop_rx.recv()),
                ArmerThen::Spinning => {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                }
                ArmerThen::Exited => {}
            }
        });
        armed_rx.recv().expect("armed");
        if let ArmerThen::Exited = then {
            armer.join().expect("armer");
        }
        ok(&d.run(&["push", "q", "moved"]));
        // Readable first: the steal after it would find the job without any wake.
        let woken = readable(w, Duration::from_secs(10));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        drop(stop_tx);
        assert!(woken, "{kind:?}, the armer {then:?}: no wake");
        let (j, _) = take_one(t, w, Duration::from_secs(10)).expect("the job");
        j.ack().expect("ack");
    });
}

/// tokio: 1,000 jobs across two consumer tasks (one taking single jobs, one batches of up to
/// 8) whose `steal_batch_async` is raced by a timer in
/// `select!` (cancelled at random points, hundreds of times): every job acked once, none
/// left claimed, none waiting.
#[test]
fn tokio_steals_cancelled_at_random_points_lose_and_hold_nothing() {
    for kind in wake_kinds() {
        tokio_steals_cancelled(kind);
    }
}

fn tokio_steals_cancelled(kind: WakeKind) {
    let d = Daemon::start();
    d.client().create_queue(&params("q")).expect("create");
    let total = 1000usize;
    let acked = std::sync::Mutex::new(Vec::new());
    let cancelled = std::sync::atomic::AtomicUsize::new(0);
    let consumer = |seed: u64| {
        let (acked, cancelled, socket) = (&acked, &cancelled, d.socket.clone());
        async move {
            let c = Client::connect(Some(&socket)).expect("connect");
            let t = c.attach_thief("q").expect("thief");
            let wake = xtcq_client::AsyncWake::new(t.wake_fd_of(kind).expect("wake")).expect("register");
            let mut rng = Rng::new(seed);
            while acked.lock().unwrap().len() < total {
                let timer = tokio::time::sleep(Duration::from_micros(rng.below(3000)));
                // The second consumer takes up to 8 at a time: the batch form is cancelled too.
                let limit = if seed == 2 { 8 } else { 1 };
                tokio::select! {
                    js = t.steal_batch_async(&wake, limit) => {
                        for j in js.expect("steal_batch_async") {
                            let p = String::from_utf8(j.payload().expect("payload")).expect("utf8");
                            j.ack().expect("ack");
                            acked.lock().unwrap().push(p);
                        }
                    }
                    _ = timer => { cancelled.fetch_add(1, std::sync::atomic::Ordering::Relaxed); }
                }
            }
        }
    };
    let producer = std::thread::spawn({
        let socket = d.socket.clone();
        move || {
            let c = Client::connect(Some(&socket)).expect("connect");
            let inj = c.attach_injector("q").expect("injector");
            let mut rng = Rng::new(3);
            for i in 0..total {
                while inj.push(format!("job {i}").as_bytes()).is_err() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if rng.below(10) == 0 {
                    std::thread::sleep(Duration::from_micros(rng.below(5000)));
                }
            }
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async { tokio::join!(consumer(1), consumer(2)) });
    producer.join().expect("producer");
    let mut got = acked.into_inner().unwrap();
    assert!(cancelled.load(std::sync::atomic::Ordering::Relaxed) > 0, "no steal was ever cancelled");
    got.sort();
    let n = got.len();
    got.dedup();
    assert_eq!((n, got.len()), (total, total), "each job acked once");
    let s = d.stats();
    assert_eq!(s["records"]["queued"].as_u64(), Some(0), "{s}");
    assert_eq!(s["records"]["claimed"].as_u64(), Some(0), "a job left claimed: {s}");
}

/// tokio's multi-thread runtime: four consumer tasks, each its own descriptor, moved between
/// four workers (a yield after every job, a `spawn_blocking` after every eighth), every other
/// steal cancelled by a timer at a random point (the disarm then runs on whichever worker polls
/// it, maybe not the one that armed), 400 jobs pushed by other processes at random gaps.
/// Every job is acked once, and an uncancelled steal never waits 3 s while a job is queued.
#[test]
fn tokio_tasks_moved_between_workers_lose_no_wake() {
    for kind in wake_kinds() {
        tokio_tasks_moved_between_workers(kind);
    }
}

fn tokio_tasks_moved_between_workers(kind: WakeKind) {
    let d = std::sync::Arc::new(Daemon::start());
    d.client().create_queue(&params("q")).expect("create");
    let total = 400usize;
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("runtime");
    let consumers: Vec<_> =
        (0..4u64).map(|seed| rt.spawn(moved_consumer(d.clone(), acked.clone(), kind, seed, total))).collect();
    let mut rng = Rng::new(11);
    let mut i = 0;
    while i < total {
        let n = (rng.below(8) + 1).min((total - i) as u64) as usize;
        let batch: String = (i..i + n).map(|k| format!("job {k}\n")).collect();
        ok(&d.run_in(&["push", "q"], batch.as_bytes()));
        i += n;
        std::thread::sleep(Duration::from_micros(rng.below(30_000)));
    }
    for c in consumers {
        rt.block_on(c).expect("a consumer task");
    }
    let mut got = std::mem::take(&mut *acked.lock().unwrap());
    got.sort();
    let n = got.len();
    got.dedup();
    assert_eq!((n, got.len()), (total, total), "{kind:?}: each job acked once");
}

/// One consumer task of [`tokio_tasks_moved_between_workers_lose_no_wake`].
async fn moved_consumer(
    d: std::sync::Arc<Daemon>,
    acked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    kind: WakeKind,
    seed: u64,
    total: usize,
) {
    let c = Client::connect(Some(&d.socket)).expect("connect");
    let t = c.attach_thief("q").expect("thief");
    let wake = xtcq_client::AsyncWake::new(t.wake_fd_of(kind).expect("wake")).expect("register");
    let mut rng = Rng::new(seed);
    for round in 0u64.. {
        if acked.lock().unwrap().len() >= total {
            return;
        }
        let limit =
            if round % 2 == 0 { Duration::from_secs(3) } else { Duration::from_micros(rng.below(3000)) };
        let Ok(j) = tokio::time::timeout(limit, t.steal_async(&wake)).await else {
            let queued = d.stats()["records"]["queued"].as_u64().unwrap_or(0);
            assert!(round % 2 == 1 || queued == 0, "{kind:?}: a task waited 3 s with {queued} jobs queued");
            continue;
        };
        let j = j.expect("steal_async");
        let p = String::from_utf8(j.payload().expect("payload")).expect("utf8");
        j.ack().expect("ack");
        acked.lock().unwrap().push(p);
        tokio::task::yield_now().await;
        if round % 8 == 0 {
            tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1)))
                .await
                .expect("blocking");
        }
    }
}

/// The role for [`another_user_cannot_reach_or_take_a_wake_socket`]: tries to send a wake to
/// the socket at `$XTCQ_TEST_WAKE_SOCKET` and to bind a name beside it; prints both results.
#[test]
fn wake_role_main() {
    let Ok(path) = std::env::var("XTCQ_TEST_WAKE_SOCKET") else { return };
    use rustix::net::{bind, sendto, socket, AddressFamily, SendFlags, SocketAddrUnix, SocketType};
    let s = socket(AddressFamily::UNIX, SocketType::DGRAM, None).expect("socket");
    let sent = sendto(&s, b"x", SendFlags::DONTWAIT, &SocketAddrUnix::new(path.as_str()).expect("addr"));
    let beside = std::path::Path::new(&path).with_file_name("0.200");
    let b = socket(AddressFamily::UNIX, SocketType::DGRAM, None).expect("socket");
    let bound = bind(&b, &SocketAddrUnix::new(&beside).expect("addr"));
    println!("@@ send {:?} bind {:?}", sent.map(|_| ()), bound);
}

/// A local user outside the daemon's group can neither send a datagram waiter a wake nor bind a name
/// in the wake directory first (the directory is the daemon's, 0750 for its group); a member
/// of the group can send one, which is at most a spurious wake.
#[test]
fn another_user_cannot_reach_or_take_a_wake_socket() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqw{tag}");
    let member = SystemUser::create(&format!("xtcqwm{tag}"), &group);
    let outsider = SystemUser::create(&format!("xtcqwo{tag}"), &format!("xtcqwx{tag}"));
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let d = Daemon::builder()
        .in_dir(dir)
        .flags(["--group", group.as_str(), "--allow-uid", member.user.as_str()])
        .start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let t = c.attach_thief("q").expect("thief");
    let w = t.wake_fd_of(WakeKind::Datagram).expect("wake");
    assert!(t.steal_or_arm(&w).expect("arm").is_none());
    let mut wake_dir = d.socket.clone().into_os_string();
    wake_dir.push(".wake");
    let socket = std::path::Path::new(&wake_dir).join(format!("{}.0", 0));
    assert!(socket.exists(), "{} missing", socket.display());
    let try_as = |u: &SystemUser| {
        let out = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args([
                "--exact",
                &test_name(module_path!(), "wake_role_main"),
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("XTCQ_TEST_WAKE_SOCKET", &socket)
            .uid(u.id("-u"))
            .gid(u.id("-g"))
            .output()
            .expect("role");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().find_map(|l| l.split_once("@@ ").map(|(_, r)| r.to_string())).unwrap_or(text)
    };
    let o = try_as(&outsider);
    assert!(o.starts_with("send Err(Os { code: 13"), "an outsider reached the socket: {o}");
    assert!(o.contains("bind Err("), "an outsider bound a name in the wake directory: {o}");
    let m = try_as(&member);
    assert!(m.starts_with("send Ok"), "a member of the group cannot send: {m}");
    assert!(m.contains("bind Err("), "a member bound a name in the daemon's directory: {m}");
    // What the member's datagram did: a wake, spurious (no job), nothing else.
    assert!(readable(&w, Duration::from_secs(10)));
    w.clear().expect("clear");
    assert!(t.steal_or_arm(&w).expect("steal").is_none(), "a datagram made a job");
}

/// The role of [`spawn_asleep`] (a waiter killed or stopped while asleep): waits on queue `q` the way
/// `$XTCQ_TEST_ASLEEP_IN` says (`futex` or `datagram`: armed on a wake descriptor of that kind;
/// `steal_wait`: inside it), says so, and waits to be killed.
#[test]
fn asleep_role_main() {
    let Ok(socket) = std::env::var("XTCQ_TEST_ARMED_SOCKET") else { return };
    let c = Client::connect(Some(std::path::Path::new(&socket))).expect("connect");
    let t = c.attach_thief("q").expect("thief");
    let kind = match std::env::var("XTCQ_TEST_ASLEEP_IN").expect("asleep in").as_str() {
        "futex" => WakeKind::Futex,
        "datagram" => WakeKind::Datagram,
        _ => {
            // Told before it sleeps; the parent waits for the sleeper count to say it does.
            // More threads of this process asleep beside this one, each its own thief.
            let threads: usize =
                std::env::var("XTCQ_TEST_ASLEEP_THREADS").map_or(1, |n| n.parse().expect("threads"));
            for _ in 1..threads {
                let t = c.attach_thief("q").expect("thief");
                std::thread::spawn(move || {
                    let _ = t.steal_wait(None);
                });
            }
            println!("@@ armed");
            match t.steal_wait(None) {
                Ok(_) => unreachable!("a job came to a consumer that was to be killed asleep"),
                // A restarted daemon took its slot for dead: the wait ends, and the role.
                Err(e) => {
                    eprintln!("steal_wait ended: {e}");
                    return;
                }
            }
        }
    };
    let w = t.wake_fd_of(kind).expect("wake");
    assert!(t.steal_or_arm(&w).expect("arm").is_none());
    println!("@@ armed");
    std::thread::sleep(Duration::from_secs(120));
}

/// Starts [`asleep_role_main`] against `d`, waiting on queue `q` the `way` it names
/// (`futex`, `datagram` or `steal_wait`), and returns once it says it is armed.
pub(super) fn spawn_asleep(d: &Daemon, way: &str) -> std::process::Child {
    spawn_asleep_threads(d, way, 1)
}

/// [`spawn_asleep`] with `threads` threads asleep (`way`: `steal_wait` only).
fn spawn_asleep_threads(d: &Daemon, way: &str, threads: usize) -> std::process::Child {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            &test_name(module_path!(), "asleep_role_main"),
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("XTCQ_TEST_ARMED_SOCKET", &d.socket)
        .env("XTCQ_TEST_ASLEEP_IN", way)
        .env("XTCQ_TEST_ASLEEP_THREADS", threads.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    while !lines.next().expect("a line").expect("read").contains("@@ armed") {}
    child
}

/// A consumer killed -9 while asleep (armed on a descriptor of either kind, or inside
/// `steal_wait`): the daemon takes it back (the sleeper count back to 0, so pushes make no
/// wake for it; a datagram waiter's socket removed and bit disarmed), and a push then wakes
/// the waiter that is left, not the dead one.
#[test]
fn a_waiter_killed_while_asleep_is_taken_back() {
    let mut ways: Vec<&str> =
        wake_kinds().into_iter().map(|k| if k == WakeKind::Futex { "futex" } else { "datagram" }).collect();
    ways.push("steal_wait");
    for way in ways {
        killed_asleep_is_taken_back(way);
    }
}

fn killed_asleep_is_taken_back(way: &str) {
    let d = Daemon::start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let mut child = spawn_asleep(&d, way);
    let sleepers = || {
        let s = d.stats();
        s["queues"][0]["metrics"]["sleepers"].as_u64().expect("sleepers")
    };
    // steal_wait looks for 20 µs before it sleeps: wait for the count rather than race it.
    wait_until(Duration::from_secs(10), "the child asleep", || sleepers() == 1);
    let mut wake_dir = d.socket.clone().into_os_string();
    wake_dir.push(".wake");
    let entries = || std::fs::read_dir(&wake_dir).map_or(0, |d| d.count());
    assert_eq!(entries(), usize::from(way == "datagram"), "{way}: sockets in the wake directory");
    child.kill().expect("kill");
    child.wait().expect("reap");
    wait_until(Duration::from_secs(10), &format!("{way}: the dead waiter taken back"), || {
        sleepers() == 0 && entries() == 0
    });
    let t = c.attach_thief("q").expect("thief");
    let w = t.wake_fd().expect("wake");
    assert!(t.steal_or_arm(&w).expect("arm").is_none());
    ok(&d.run(&["push", "q", "after"]));
    assert!(take_one(&t, &w, Duration::from_secs(10)).is_some(), "{way}: the live waiter was not woken");
}

/// The sleeper count of the first queue of `d`, from its stats.
fn sleepers_of(d: &Daemon) -> u64 {
    d.stats()["queues"][0]["metrics"]["sleepers"].as_u64().expect("sleepers")
}

/// Rewrites the daemon's state file in `dir` (no daemon running) so that the slot of `pid`
/// names another start time: to the next daemon that process looks dead (its pid reused),
/// as a live process in another pid namespace does.
fn disown_in_state_file(dir: &std::path::Path, pid: u32) {
    let path = dir.join("xtcqd.sock.state");
    let mut st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("state file")).expect("json");
    let mut found = false;
    for (_, slot) in st["slots"].as_object_mut().expect("slots").iter_mut() {
        if slot["pid"].as_u64() == Some(u64::from(pid)) {
            let t = slot["start_time"].as_u64().expect("a start time");
            slot["start_time"] = serde_json::json!(t + 1);
            found = true;
        }
    }
    assert!(found, "no slot of pid {pid} in the state file");
    std::fs::write(&path, serde_json::to_vec(&st).expect("json")).expect("write the state file");
}

/// A consumer killed asleep in `steal_wait` while no daemon runs: the next daemon takes its
/// sleep off the count when it adopts the segment, a live sleeper beside it stays counted,
/// and a second restart takes nothing more off.
#[test]
fn a_waiter_killed_asleep_while_no_daemon_runs_is_taken_back_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let mut d = Daemon::builder().at(dir).start();
    d.client().create_queue(&params("q")).expect("create");
    let mut dead = spawn_asleep(&d, "steal_wait");
    wait_until(Duration::from_secs(10), "the first asleep", || sleepers_of(&d) == 1);
    let mut live = spawn_asleep(&d, "steal_wait");
    wait_until(Duration::from_secs(10), "both asleep", || sleepers_of(&d) == 2);
    d.kill();
    dead.kill().expect("kill");
    dead.wait().expect("reap");
    for restart in 1..=2 {
        d = Daemon::builder().at(dir).start();
        assert_eq!(sleepers_of(&d), 1, "restart {restart}: the live sleeper alone is counted");
        d.kill();
    }
    live.kill().expect("kill");
    live.wait().expect("reap");
}

/// A consumer asleep in `steal_wait` that a restarted daemon takes for dead although it lives
/// (the daemon cannot verify it: here its start time in the state file changed): the adopt
/// takes its sleep off the count, and when it wakes to find its slot gone its sleep ends
/// without taking the count down again. Before, the count wrapped below zero, so the next
/// consumer to sleep was counted as nobody and a push left it asleep.
#[test]
fn a_live_sleeper_a_restarted_daemon_takes_for_dead_leaves_the_count_right() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let mut d = Daemon::builder().at(dir).start();
    d.client().create_queue(&params("q")).expect("create");
    let mut child = spawn_asleep(&d, "steal_wait");
    wait_until(Duration::from_secs(10), "the child asleep", || sleepers_of(&d) == 1);
    d.kill();
    disown_in_state_file(dir, child.id());
    d = Daemon::builder().at(dir).start();
    assert_eq!(sleepers_of(&d), 0, "the adopt took the sleep of the slot it recovered off the count");
    // Its next look finds the slot no longer its own, and `steal_wait` returns (the role
    // then exits): its sleep has ended by then.
    wait_until(Duration::from_secs(30), "the disowned sleeper to wake and exit", || {
        child.try_wait().expect("try_wait").is_some()
    });
    assert_eq!(sleepers_of(&d), 0, "the disowned sleeper's end took the count below zero");
    // The count is right for the next sleeper: a push wakes it.
    let c = d.client();
    let t = c.attach_thief("q").expect("thief");
    let w = t.wake_fd().expect("wake");
    assert!(t.steal_or_arm(&w).expect("arm").is_none());
    assert_eq!(sleepers_of(&d), 1, "the next waiter counted");
    ok(&d.run(&["push", "q", "after"]));
    assert!(take_one(&t, &w, Duration::from_secs(10)).is_some(), "the waiter was not woken");
}

/// Four threads of one process asleep in `steal_wait`, beside a live waiter of this process;
/// the process killed: its four sleeps come off the count, and no more (the live waiter stays
/// counted, and a push wakes it).
#[test]
fn threads_of_a_process_killed_asleep_come_off_the_count_and_no_more() {
    let d = Daemon::start();
    let c = d.client();
    c.create_queue(&params("q")).expect("create");
    let t = c.attach_thief("q").expect("thief");
    let w = t.wake_fd_of(WakeKind::Datagram).expect("wake");
    assert!(t.steal_or_arm(&w).expect("arm").is_none());
    let mut child = spawn_asleep_threads(&d, "steal_wait", 4);
    wait_until(Duration::from_secs(10), "the four threads asleep", || sleepers_of(&d) == 5);
    child.kill().expect("kill");
    child.wait().expect("reap");
    wait_until(Duration::from_secs(10), "the dead threads taken off", || sleepers_of(&d) <= 1);
    assert_eq!(sleepers_of(&d), 1, "the live waiter is still counted");
    ok(&d.run(&["push", "q", "after"]));
    assert!(take_one(&t, &w, Duration::from_secs(10)).is_some(), "the live waiter was not woken");
}
