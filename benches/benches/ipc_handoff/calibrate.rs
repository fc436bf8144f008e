//! What the bench measures before the table: the POSIX queue depth allowed, the one-line
//! probe, and single-process costs per operation.

use super::*;

/// The deepest POSIX queue of 64-byte messages we may create: [`MQ_DEPTH`], else the
/// system's `msg_max` (unprivileged processes are capped there).
pub(crate) fn mq_depth() -> i64 {
    let sys: i64 = std::fs::read_to_string("/proc/sys/fs/mqueue/msg_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(10);
    let name = std::ffi::CString::new(format!("/xtcq-bench-probe-{}", std::process::id())).unwrap();
    for depth in [MQ_DEPTH, sys.min(MQ_DEPTH)] {
        // SAFETY: as in `Bench::one`.
        let mq = unsafe {
            let mut attr: libc::mq_attr = std::mem::zeroed();
            attr.mq_maxmsg = depth;
            attr.mq_msgsize = MSG as i64;
            libc::mq_open(
                name.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
                &attr as *const libc::mq_attr,
            )
        };
        if mq >= 0 {
            // SAFETY: closing and unlinking what we just created.
            unsafe {
                libc::mq_close(mq);
                libc::mq_unlink(name.as_ptr());
            }
            return depth;
        }
    }
    0
}

/// One way of a ping-pong of one cache line between a thread on CPU 0 (this one, pinned
/// already) and one on CPU 1: the floor under any cross-core hand-off.
pub(crate) fn line_handoff_ns(rounds: u64) -> f64 {
    let word = std::sync::Arc::new(AtomicU64::new(0));
    let w = word.clone();
    let t = std::thread::spawn(move || {
        pin(1);
        for i in 0..rounds {
            while w.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            w.store(2 * i + 2, Ordering::Release);
        }
    });
    // Let the other thread get going before timing.
    std::thread::sleep(Duration::from_millis(10));
    let t0 = monotonic_ns();
    for i in 0..rounds {
        word.store(2 * i + 1, Ordering::Release);
        while word.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let ns = (monotonic_ns() - t0) as f64 / (2 * rounds) as f64;
    t.join().expect("ping-pong thread");
    ns
}

/// Single-process costs, to explain the cross-process figures: push; steal + payload +
/// ack; both in one thread (the cache lines never leave this core); a clock read.
pub(crate) fn calibrate(owner: &OwnerHandle, client: &Client) -> Vec<(&'static str, f64)> {
    let thief = client.attach_thief(QUEUE).expect("attach_thief");
    let n = 50_000u64;
    let mut out = Vec::new();
    if ncpus() >= 2 {
        out.push(("cache-line hand-off CPU 0 <-> 1, one way", line_handoff_ns(200_000)));
    }
    let m = [0xabu8; MSG];
    let mut v = Vec::with_capacity(MSG);
    let t = monotonic_ns();
    for _ in 0..n {
        let _ = monotonic_ns();
    }
    out.push(("clock_gettime(CLOCK_MONOTONIC)", (monotonic_ns() - t) as f64 / n as f64));
    let t = monotonic_ns();
    for _ in 0..n {
        owner.push(&m).expect("push");
    }
    out.push(("push, 64 B (same core)", (monotonic_ns() - t) as f64 / n as f64));
    let t = monotonic_ns();
    for _ in 0..n {
        let j = thief.steal().expect("steal").expect("a job");
        v.clear();
        j.read_payload(&mut v).expect("payload");
        j.ack().expect("ack");
    }
    out.push(("steal + payload + ack (same core)", (monotonic_ns() - t) as f64 / n as f64));
    let t = monotonic_ns();
    for _ in 0..n {
        owner.push(&m).expect("push");
        let j = thief.steal().expect("steal").expect("a job");
        v.clear();
        j.read_payload(&mut v).expect("payload");
        j.ack().expect("ack");
    }
    out.push(("push -> steal -> ack round, one thread", (monotonic_ns() - t) as f64 / n as f64));
    out
}
