//! A process forks while another of its threads makes and drops handles (the first use
//! installs the fork hook, `shm-layout/src/fork.rs`). A child that then makes a handle of its
//! own (a fork pool's backend connecting after the fork, as the C API asks) must not hang on
//! an install the parent's other thread was inside at the fork. (Found by a red-team pass.)
//!
//! - One test in this file: its forks must not copy the locks of other tests' threads.
//! - The child stands for a backend the daemon registered: it writes its own pid in the
//!   slot's record, as the daemon does, makes a handle, and leaves with `_exit`.
//! - Each child gets 10 s; past that it is killed and the test fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xtcq_shm::{QueueSpec, Segment, SegmentConfig, Thief};

/// Waits for `pid` up to `limit`; `None` (after killing it) if it did not exit by then.
fn wait_bounded(pid: libc::pid_t, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: plain waitpid on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Some(status);
        }
        assert!(r == 0, "waitpid failed");
        if start.elapsed() > limit {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_child_forked_while_another_thread_makes_handles_can_make_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let config = SegmentConfig::small().with_records(64).with_process_slots(4);
    let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).unwrap());
    let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
    let stop = AtomicBool::new(false);
    let mut hung = 0;
    const FORKS: usize = 200;
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                drop(Thief::new(seg.clone(), &q, 1).unwrap());
            }
        });
        for _ in 0..FORKS {
            // SAFETY: the child makes one handle (the registry's lock, an allocation) and
            // leaves with `_exit`.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                let me = std::process::id();
                seg.process_slot(2).unwrap().pid.store(me, Ordering::Relaxed);
                let t = Thief::new(seg.clone(), &q, 2);
                // SAFETY: leaves without unwinding or running the parent's destructors.
                unsafe { libc::_exit(i32::from(t.is_err())) };
            }
            match wait_bounded(pid, Duration::from_secs(10)) {
                None => hung += 1,
                Some(status) => assert_eq!(status, 0, "the child could not make a handle"),
            }
            if hung > 0 {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(hung, 0, "a forked child hung making a handle (the registry's lock was held at the fork)");
}
