//! Run under `strace -f` by `tests/no_syscall_push.rs`: attaches as the owner of a queue on a
//! running daemon, writes a marker line to stderr, pushes, writes another marker, exits.
//! The markers are single `write(2, …)` calls, so the test can find the pushing thread's id
//! and what it did in between in strace's output.
//!
//! `xtcq-push-probe SOCKET QUEUE quiet N`: nobody waits; pushes N jobs.
//! `xtcq-push-probe SOCKET QUEUE sleeper N`: first a thief thread of this process goes to
//! sleep in `steal_wait` (checked in /proc: the thread is in the futex system call), then
//! pushes N jobs; the thief must be woken (the negative control).
//! `xtcq-push-probe SOCKET QUEUE descriptor N`: first a thief of this process arms its wake
//! descriptor, then N jobs are pushed; the descriptor must become readable.
//! `xtcq-push-probe SOCKET QUEUE registered N`: a thief of this process holds a wake
//! descriptor it armed once and disarmed again (a consumer awake, busy with a job); then N
//! jobs are pushed, none of them waking anybody.
//!
//! Before either, one push between `XTCQ-FIRST-BEGIN` and `XTCQ-FIRST-END` markers (the
//! process's first push), popped and acked again. Prints `tid T pushed N` on stdout at the end.

use std::path::PathBuf;
use std::time::{Duration, Instant};

const FIRST_BEGIN: &[u8] = b"XTCQ-FIRST-BEGIN\n";
const FIRST_END: &[u8] = b"XTCQ-FIRST-END\n";
const BEGIN: &[u8] = b"XTCQ-PUSH-BEGIN\n";
const END: &[u8] = b"XTCQ-PUSH-END\n";

fn marker(m: &[u8]) {
    // SAFETY: one write(2) of a valid buffer to stderr.
    unsafe { libc::write(2, m.as_ptr().cast(), m.len()) };
}

/// The system call `tid` of this process is blocked in, from /proc (None if unreadable).
fn blocked_in(tid: i32) -> Option<i64> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: xtcq-push-probe SOCKET QUEUE quiet|sleeper|descriptor|registered N");
        std::process::exit(2);
    }
    let socket = PathBuf::from(&args[1]);
    let queue = &args[2];
    let (sleeper, descriptor) = match args[3].as_str() {
        "quiet" | "registered" => (false, false),
        "sleeper" => (true, false),
        "descriptor" => (false, true),
        m => panic!("unknown mode {m}"),
    };
    let n: usize = args[4].parse().expect("N");

    let client = xtcq_client::Client::connect(Some(&socket)).expect("connect");
    let owner = client.attach_owner(queue).expect("attach_owner");
    let payload = [0x5au8; 64];

    // The process's first push, marked apart: it may do one-time set-up (the first clock
    // read). Popped again, so that nothing is queued when the thief goes to sleep.
    marker(FIRST_BEGIN);
    owner.push(&payload).expect("first push");
    marker(FIRST_END);
    owner.pop().expect("pop").expect("the first job").ack().expect("ack");

    let thief_thread = if sleeper {
        let thief = client.attach_thief(queue).expect("attach_thief");
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(gettid()).expect("send tid");
            let job = thief.steal_wait(Some(Duration::from_secs(30))).expect("steal_wait");
            let job = job.expect("the sleeping thief was not woken by the push (timed out)");
            job.ack().expect("ack");
        });
        let tid = rx.recv().expect("thief tid");
        let deadline = Instant::now() + Duration::from_secs(20);
        while blocked_in(tid) != Some(libc::SYS_futex) {
            assert!(Instant::now() < deadline, "the thief thread did not go to sleep in futex in 20 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        Some(t)
    } else {
        None
    };

    let armed = descriptor.then(|| {
        let thief = client.attach_thief(queue).expect("attach_thief");
        let wake = thief.wake_fd().expect("wake_fd");
        assert!(thief.steal_or_arm(&wake).expect("steal_or_arm").is_none(), "a job was queued");
        (thief, wake)
    });

    let _registered = (args[3] == "registered").then(|| {
        let thief = client.attach_thief(queue).expect("attach_thief");
        let wake = thief.wake_fd().expect("wake_fd");
        assert!(thief.steal_or_arm(&wake).expect("steal_or_arm").is_none(), "a job was queued");
        wake.disarm_and_hand_on();
        (thief, wake)
    });

    marker(BEGIN);
    for _ in 0..n {
        if let Err(e) = owner.push(&payload) {
            marker(END);
            panic!("push: {e}");
        }
    }
    marker(END);

    if let Some(t) = thief_thread {
        t.join().expect("thief thread");
    }
    if let Some((thief, wake)) = armed {
        use std::os::fd::AsRawFd;
        let mut pfd = libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: poll(2) of one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 30_000) };
        assert!(n > 0, "the armed descriptor was not made readable by the push");
        wake.clear().expect("clear");
        thief.steal_or_arm(&wake).expect("steal").expect("the job").ack().expect("ack");
    }
    println!("tid {} pushed {n}", gettid());
}

/// The calling thread's kernel id (strace names threads by it).
fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}
