//! Handles inherited across `fork()` by a process using the engine (which does not refuse
//! them as the client and the C API do) count into the parent's counter block without losing
//! a count: every count is an atomic add. (Found by a red-team pass when counts were a plain
//! load and store in a per-handle lane, since removed.)
//!
//! - One test in this file: a fork while other test threads run could copy a held lock.
//! - The child only pushes, steals and acks, then leaves with `_exit`.
//! - The parent bounds its wait and kills the child rather than hang.

use std::sync::Arc;
use std::time::{Duration, Instant};
use xtcq_shm::metrics::Counter;
use xtcq_shm::{Injector, QueueSpec, Segment, SegmentConfig, Thief};

/// Pushes, steals and acks until `until`; returns the jobs pushed.
fn churn(injector: &Injector, thief: &Thief, until: Instant) -> u64 {
    let mut pushed = 0u64;
    while Instant::now() < until {
        for _ in 0..64 {
            if injector.push(b"x").is_ok() {
                pushed += 1;
            }
            if let Some(j) = thief.steal().expect("steal") {
                j.ack().expect("ack");
            }
        }
    }
    pushed
}

/// Waits for `pid` up to `deadline`, killing it past that; its exit status.
fn wait_bounded(pid: libc::pid_t, deadline: Duration) -> i32 {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: plain waitpid on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return status;
        }
        assert!(r == 0, "waitpid failed");
        if start.elapsed() > deadline {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_forked_child_using_inherited_handles_loses_no_count() {
    let dir = tempfile::tempdir().unwrap();
    let config = SegmentConfig::small()
        .with_deque_capacity(1024)
        .with_records(4096)
        .with_overflow_capacity(65536)
        .with_process_slots(4);
    let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).unwrap());
    let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
    // Each handle is the first of its slot: each holds its slot's lane, bound below to this
    // thread (the one that forks).
    let injector = Injector::new(seg.clone(), &q, 1).unwrap();
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    injector.push(b"bind").unwrap();
    thief.steal().unwrap().expect("the job").ack().unwrap();
    // A handle of slot 3 made before the fork and first used after it, in both: an
    // unbound lane must not be bound by the child as well as by the parent.
    let late = Thief::new(seg.clone(), &q, 3).unwrap();

    let mut fds = [0; 2];
    // SAFETY: a pipe for the child's count.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let until = Instant::now() + Duration::from_millis(400);
    // SAFETY: the child runs only the job path below (no lock taken in it), then `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut n = churn(&injector, &late, until - Duration::from_millis(200));
        // The child drops its copy and makes a new handle of the parent's slot (as a Rust
        // client attaching again over the inherited connection would): no lane either.
        drop(late);
        let again = Thief::new(seg.clone(), &q, 3).unwrap();
        n += churn(&injector, &again, until) + churn(&injector, &thief, until + Duration::from_millis(100));
        // SAFETY: writes 8 bytes from a live buffer, then leaves without unwinding.
        unsafe {
            libc::write(fds[1], n.to_le_bytes().as_ptr().cast(), 8);
            libc::_exit(0);
        }
    }
    // SAFETY: our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mine = churn(&injector, &late, until) + churn(&injector, &thief, until + Duration::from_millis(100));
    assert_eq!(wait_bounded(pid, Duration::from_secs(60)), 0, "the child failed");
    let mut buf = [0u8; 8];
    // SAFETY: reads into a live buffer.
    assert_eq!(unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), 8) }, 8);
    // SAFETY: ours.
    unsafe { libc::close(fds[0]) };
    let theirs = u64::from_le_bytes(buf);
    while let Some(j) = thief.steal().unwrap() {
        j.ack().unwrap();
    }
    let t = seg.queue_totals(q.index);
    let pushed = 1 + mine + theirs;
    assert_eq!(t.get(Counter::Pushed), pushed, "pushes counted ({mine} here, {theirs} in the child)");
    assert_eq!(t.get(Counter::Claimed), pushed, "claims counted");
    assert_eq!(t.get(Counter::Acked), pushed, "acks counted");
}
