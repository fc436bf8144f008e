//! Cross-process hand-off: xtcq vs a pipe, a Unix stream socket and a POSIX message queue.
//!
//! ```sh
//! cargo bench -p xtcq-tests --bench ipc_handoff                      # full: a few minutes
//! XTCQ_BENCH_QUICK=1 cargo bench -p xtcq-tests --bench ipc_handoff   # quick: under a minute
//! ```
//!
//! One producer process (this one) and one consumer process (this binary again, in a role),
//! 64-byte messages. xtcq runs over a real daemon (`xtcq-test-daemon`, xtcqd's own main): the
//! producer owns a deque and `push`es; the consumer `steal`s (claim included), copies the
//! payload out and `ack`s. The others move the same 64 bytes with write(2) / mq_send(3) and
//! read(2) / mq_receive(3).
//!
//! Each transport runs with the consumer spinning (xtcq: `steal` in a loop; the others:
//! `O_NONBLOCK` reads retried on EAGAIN) and sleeping (xtcq: `steal_wait`, a futex; the
//! others: blocking reads). Two phases per consumer process:
//! - throughput: the producer sends N messages as fast as the transport takes them (xtcq:
//!   a full queue is retried; pipes and sockets block); rate = N / (consumer's time of the
//!   last message - producer's time before the first);
//! - latency: one message at a time. The producer writes CLOCK_MONOTONIC into the payload
//!   just before sending; the consumer subtracts it from CLOCK_MONOTONIC just after
//!   receiving (same clock in both processes), then acks and bumps a counter in a shared
//!   page; the producer waits for the counter, then a gap (long enough for a sleeping
//!   consumer to be back asleep), then sends the next.
//!
//! Producer and consumer are pinned to CPUs 0 and 1 (`XTCQ_BENCH_NO_PIN=1` to not pin).
//! Every figure is the median over the repetitions (3 full, 1 quick).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::collections::VecDeque;

use xtcq_client::{Client, Flavor, Job, OwnerHandle, QueueParams};
use xtcq_tests::{now_ns, Daemon};

const MSG: usize = 64;
const QUEUE: &str = "bench";

const SIZES: &[&str] = &[
    "--queues",
    "2",
    "--deques-per-queue",
    "2",
    "--deque-capacity",
    "65536",
    "--records",
    "131072",
    "--payload-bytes",
    "64",
    "--process-slots",
    "16",
    "--overflow-capacity",
    "65536",
];

/// Depth asked of the POSIX queue: the 64 KiB a pipe holds, in 64-byte messages.
const MQ_DEPTH: i64 = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Xtcq,
    Pipe,
    Unix,
    Mq,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Xtcq => "xtcq",
            Transport::Pipe => "pipe",
            Transport::Unix => "unix-stream",
            Transport::Mq => "posix-mq",
        }
    }
    fn parse(s: &str) -> Transport {
        match s {
            "xtcq" => Transport::Xtcq,
            "pipe" => Transport::Pipe,
            "unix-stream" => Transport::Unix,
            "posix-mq" => Transport::Mq,
            _ => panic!("unknown transport {s}"),
        }
    }
}

/// The page producer and consumer share for pacing (a file mapped by both).
#[repr(C, align(128))]
struct Ctl {
    /// Set by the consumer once it is ready to receive.
    ready: AtomicU64,
    _pad0: [u64; 15],
    /// Messages the consumer has taken (bumped per message in the latency phase, once at
    /// the end of the throughput phase).
    done: AtomicU64,
    _pad1: [u64; 15],
    /// CLOCK_MONOTONIC when the consumer took the throughput phase's last message.
    t_end: AtomicU64,
}

struct CtlMap {
    ptr: *mut Ctl,
}

impl CtlMap {
    fn open(path: &Path, create: bool) -> CtlMap {
        let f = if create {
            let f = File::options().read(true).write(true).create_new(true).open(path).expect("ctl file");
            f.set_len(4096).expect("size ctl file");
            f
        } else {
            File::options().read(true).write(true).open(path).expect("ctl file")
        };
        // SAFETY: a shared mapping of a 4096-byte file we hold open; unmapped on drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "mmap ctl: {}", std::io::Error::last_os_error());
        CtlMap { ptr: p.cast() }
    }
    fn get(&self) -> &Ctl {
        // SAFETY: the mapping is live, page-aligned, 4096 bytes, and Ctl is atomics only
        // (zeroed file = all counters 0).
        unsafe { &*self.ptr }
    }
}

impl Drop for CtlMap {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr.cast(), 4096) };
    }
}

fn encode(seq: u64, buf: &mut [u8; MSG]) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..16].copy_from_slice(&now_ns().to_le_bytes());
}

fn decode(b: &[u8]) -> (u64, u64) {
    (u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..16].try_into().unwrap()))
}

fn pin(cpu: usize) {
    if std::env::var_os("XTCQ_BENCH_NO_PIN").is_some() {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET within its bounds; affinity of this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// CPUs online (not `available_parallelism`, which shrinks to the affinity mask once pinned).
fn ncpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).max(1) as usize
}

fn env_u64(k: &str) -> Option<u64> {
    std::env::var(k).ok().and_then(|v| v.parse().ok())
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

// ---------------------------------------------------------------- consumer (child) side

/// What a consumer receives with.
enum Rx<'a> {
    Xtcq { thief: &'a xtcq_client::ThiefHandle, buf: Vec<u8>, batch: usize, pending: VecDeque<Job<'a>> },
    Stream { fd: RawFd, buf: Vec<u8>, start: usize, end: usize },
    Mq { mq: libc::mqd_t, buf: Vec<u8> },
}

impl Rx<'_> {
    /// Receives one message (spinning or sleeping as set up), hands its `(seq, ts)` and the
    /// time it arrived to `f`, then acks it.
    fn recv(&mut self, spin: bool, f: &mut impl FnMut(u64, u64)) {
        match self {
            Rx::Xtcq { thief, buf, batch, pending } => {
                let job = loop {
                    if *batch > 1 {
                        if let Some(j) = pending.pop_front() {
                            break j;
                        }
                        pending.extend(thief.steal_batch(*batch).expect("steal_batch"));
                        continue;
                    }
                    let j = if spin { thief.steal() } else { thief.steal_wait(None) };
                    match j.expect("steal") {
                        Some(j) => break j,
                        None => std::hint::spin_loop(),
                    }
                };
                buf.clear();
                job.read_payload(buf).expect("payload");
                assert_eq!(buf.len(), MSG, "payload length");
                let (seq, ts) = decode(buf);
                f(seq, ts);
                job.ack().expect("ack");
            }
            Rx::Stream { fd, buf, start, end } => {
                while *end - *start < MSG {
                    if *start > 0 {
                        buf.copy_within(*start..*end, 0);
                        *end -= *start;
                        *start = 0;
                    }
                    // SAFETY: read into the free tail of our buffer.
                    let n = unsafe { libc::read(*fd, buf[*end..].as_mut_ptr().cast(), buf.len() - *end) };
                    if n > 0 {
                        *end += n as usize;
                    } else if n == 0 {
                        panic!("producer closed the stream early");
                    } else {
                        let e = errno();
                        match e.raw_os_error() {
                            Some(libc::EAGAIN) => std::hint::spin_loop(),
                            Some(libc::EINTR) => {}
                            _ => panic!("read: {e}"),
                        }
                    }
                }
                let (seq, ts) = decode(&buf[*start..*start + MSG]);
                *start += MSG;
                f(seq, ts);
            }
            Rx::Mq { mq, buf } => loop {
                // SAFETY: receive into our buffer of at least mq_msgsize bytes.
                let n = unsafe {
                    libc::mq_receive(*mq, buf.as_mut_ptr().cast(), buf.len(), std::ptr::null_mut())
                };
                if n == MSG as isize {
                    let (seq, ts) = decode(buf);
                    f(seq, ts);
                    return;
                }
                let e = errno();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => std::hint::spin_loop(),
                    Some(libc::EINTR) => {}
                    _ => panic!("mq_receive returned {n}: {e}"),
                }
            },
        }
    }
}

fn consumer() {
    pin(1.min(ncpus() - 1));
    let transport = Transport::parse(&std::env::var("XTCQ_BENCH_TRANSPORT").expect("transport"));
    let spin = std::env::var("XTCQ_BENCH_MODE").expect("mode") == "spin";
    let n_thr = env_u64("XTCQ_BENCH_N_THR").expect("n_thr");
    let n_lat = env_u64("XTCQ_BENCH_N_LAT").expect("n_lat");
    let ctl = CtlMap::open(Path::new(&std::env::var_os("XTCQ_BENCH_CTL").expect("ctl")), false);
    let ctl = ctl.get();

    let client;
    let thief;
    let mut rx = match transport {
        Transport::Xtcq => {
            let socket = PathBuf::from(std::env::var_os("XTCQ_SOCKET").expect("socket"));
            client = Client::connect(Some(&socket)).expect("connect");
            thief = client.attach_thief(QUEUE).expect("attach_thief");
            Rx::Xtcq {
                thief: &thief,
                buf: Vec::with_capacity(MSG),
                batch: env_u64("XTCQ_BENCH_BATCH").unwrap_or(1) as usize,
                pending: VecDeque::new(),
            }
        }
        Transport::Pipe | Transport::Unix => {
            if spin {
                // SAFETY: fcntl on our stdin.
                unsafe {
                    let fl = libc::fcntl(0, libc::F_GETFL);
                    libc::fcntl(0, libc::F_SETFL, fl | libc::O_NONBLOCK);
                }
            }
            Rx::Stream { fd: 0, buf: vec![0; 64 * 1024], start: 0, end: 0 }
        }
        Transport::Mq => {
            let name = std::ffi::CString::new(std::env::var("XTCQ_BENCH_MQ").expect("mq name")).unwrap();
            let fl = libc::O_RDONLY | if spin { libc::O_NONBLOCK } else { 0 };
            // SAFETY: mq_open of an existing queue by a NUL-terminated name.
            let mq = unsafe { libc::mq_open(name.as_ptr(), fl) };
            assert!(mq >= 0, "consumer mq_open: {}", errno());
            // SAFETY: mq_getattr into a zeroed attr of a queue we opened.
            let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
            unsafe { libc::mq_getattr(mq, &mut attr) };
            Rx::Mq { mq, buf: vec![0; attr.mq_msgsize.max(MSG as i64) as usize] }
        }
    };
    ctl.ready.store(1, Ordering::Release);

    // Throughput: N messages, checked (each sequence number once, in order for the streams).
    let mut expect_sum = 0u64;
    let mut sum = 0u64;
    for i in 0..n_thr {
        rx.recv(spin, &mut |seq, _| sum = sum.wrapping_add(seq));
        expect_sum = expect_sum.wrapping_add(i);
    }
    ctl.t_end.store(now_ns(), Ordering::Relaxed);
    assert_eq!(sum, expect_sum, "throughput phase: messages lost or duplicated");
    ctl.done.store(n_thr, Ordering::Release);

    // Latency: one at a time.
    let mut lat = Vec::with_capacity(n_lat as usize);
    for i in 0..n_lat {
        let mut got = (0, 0);
        rx.recv(spin, &mut |seq, ts| got = (seq, now_ns().saturating_sub(ts)));
        assert_eq!(got.0, n_thr + i, "latency phase: out of order");
        lat.push(got.1);
        ctl.done.store(n_thr + i + 1, Ordering::Release);
    }
    lat.sort_unstable();
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!("@@ lat {} {} {} {} {}", lat.len(), q(0.5), q(0.99), q(0.999), lat[lat.len() - 1]);
}

// ---------------------------------------------------------------- producer (parent) side

/// What the producer sends with.
enum Tx<'a> {
    Xtcq(&'a OwnerHandle),
    Fd(OwnedFd),
    Mq(libc::mqd_t),
}

impl Tx<'_> {
    fn send(&self, m: &[u8; MSG]) {
        match self {
            Tx::Xtcq(owner) => {
                let mut tries = 0u32;
                while let Err(e) = owner.push(m) {
                    match e {
                        xtcq_client::Error::QueueFull { .. } | xtcq_client::Error::RecordsFull(_) => {
                            std::hint::spin_loop();
                            tries += 1;
                            // 2^28 failed pushes: far beyond seconds; the consumer is gone.
                            assert!(tries < 1 << 28, "the queue stayed full: is the consumer alive?");
                        }
                        e => panic!("push: {e}"),
                    }
                }
            }
            Tx::Fd(fd) => {
                let mut off = 0;
                while off < MSG {
                    // SAFETY: write from our message buffer.
                    let n = unsafe { libc::write(fd.as_raw_fd(), m[off..].as_ptr().cast(), MSG - off) };
                    if n > 0 {
                        off += n as usize;
                    } else if errno().raw_os_error() != Some(libc::EINTR) {
                        panic!("write: {}", errno());
                    }
                }
            }
            Tx::Mq(mq) => {
                // A deadline far off, so that a dead consumer fails the run instead of hanging it.
                let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: clock_gettime into a valid timespec; mq_timedsend of our 64-byte
                // buffer on a queue we opened, with that deadline (CLOCK_REALTIME, as it wants).
                while unsafe {
                    libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts);
                    ts.tv_sec += 60;
                    libc::mq_timedsend(*mq, m.as_ptr().cast(), MSG, 0, &ts)
                } != 0
                {
                    assert_eq!(errno().raw_os_error(), Some(libc::EINTR), "mq_send: {}", errno());
                }
            }
        }
    }
}

/// One consumer process's figures.
#[derive(Clone, Copy, Debug)]
struct Run {
    mps: f64,
    /// The producer's own rate: messages / time until its last send returned.
    send_mps: f64,
    p50: u64,
    p99: u64,
    p999: u64,
}

struct Bench {
    daemon: Daemon,
    owner: OwnerHandle,
    _client: Client,
    n_thr: u64,
    n_lat: u64,
    mq_depth: i64,
    runs: u32,
    sleep_gap_ns: u64,
}

/// Spins until `f` holds, checking the clock and the child now and then.
fn wait_for(child: &mut Child, what: &str, limit: Duration, f: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    let mut k = 0u32;
    while !f() {
        std::hint::spin_loop();
        k = k.wrapping_add(1);
        if k & 0xffff == 0 {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("consumer exited ({st}) while waiting for {what}");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("timed out waiting for {what}");
            }
        }
    }
}

fn spin_until(t: u64) {
    while now_ns() < t {
        std::hint::spin_loop();
    }
}

impl Bench {
    fn one(&self, transport: Transport, spin: bool, batch: usize, k: u32) -> Run {
        let ctl_path = self.daemon.dir().join(format!("ctl.{}.{spin}.{batch}.{k}", transport.name()));
        let ctl_map = CtlMap::open(&ctl_path, true);
        let ctl = ctl_map.get();
        let mut cmd = Command::new(std::env::current_exe().expect("current exe"));
        cmd.env("XTCQ_BENCH_ROLE", "consumer")
            .env("XTCQ_BENCH_TRANSPORT", transport.name())
            .env("XTCQ_BENCH_MODE", if spin { "spin" } else { "sleep" })
            .env("XTCQ_BENCH_BATCH", batch.to_string())
            .env("XTCQ_BENCH_N_THR", self.n_thr.to_string())
            .env("XTCQ_BENCH_N_LAT", self.n_lat.to_string())
            .env("XTCQ_BENCH_CTL", &ctl_path)
            .env("XTCQ_SOCKET", &self.daemon.socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut mq_name = None;
        let tx = match transport {
            Transport::Xtcq => {
                cmd.stdin(Stdio::null());
                Tx::Xtcq(&self.owner)
            }
            Transport::Pipe | Transport::Unix => {
                let mut fds = [0; 2];
                // SAFETY: pipe2 / socketpair fill two fds, which we own from here on.
                let r = unsafe {
                    if transport == Transport::Pipe {
                        libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC)
                    } else {
                        libc::socketpair(
                            libc::AF_UNIX,
                            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                            0,
                            fds.as_mut_ptr(),
                        )
                    }
                };
                assert_eq!(r, 0, "pipe/socketpair: {}", errno());
                // SAFETY: fresh fds from the call above.
                let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
                cmd.stdin(Stdio::from(rd));
                Tx::Fd(wr)
            }
            Transport::Mq => {
                let name = format!("/xtcq-bench-{}-{}-{k}", std::process::id(), spin);
                let c = std::ffi::CString::new(name.clone()).unwrap();
                // SAFETY: a zeroed mq_attr with the fields mq_open reads set; a NUL-terminated
                // name; the mode is passed as the variadic argument mq_open expects.
                let mq = unsafe {
                    let mut attr: libc::mq_attr = std::mem::zeroed();
                    attr.mq_maxmsg = self.mq_depth;
                    attr.mq_msgsize = MSG as i64;
                    libc::mq_open(
                        c.as_ptr(),
                        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o600 as libc::c_uint,
                        &attr as *const libc::mq_attr,
                    )
                };
                assert!(mq >= 0, "mq_open {name} depth {}: {}", self.mq_depth, errno());
                cmd.env("XTCQ_BENCH_MQ", &name).stdin(Stdio::null());
                mq_name = Some(c);
                Tx::Mq(mq)
            }
        };
        let mut child = cmd.spawn().expect("spawn consumer");
        drop(cmd); // closes our copy of the consumer's end of a pipe or socket

        let limit = Duration::from_secs(120);
        wait_for(&mut child, "the consumer to be ready", limit, || ctl.ready.load(Ordering::Acquire) == 1);
        let mut m = [0xabu8; MSG];
        let t0 = now_ns();
        for i in 0..self.n_thr {
            encode(i, &mut m);
            tx.send(&m);
        }
        let t_sent = now_ns();
        wait_for(&mut child, "the throughput phase", limit, || {
            ctl.done.load(Ordering::Acquire) == self.n_thr
        });
        let mps = self.n_thr as f64 * 1e3 / (ctl.t_end.load(Ordering::Relaxed) - t0) as f64;
        let send_mps = self.n_thr as f64 * 1e3 / (t_sent - t0) as f64;

        // A sleeping consumer needs a few µs to be back asleep after it bumps `done`; give it
        // far more, so that each message finds it asleep.
        let gap = if spin { 2_000 } else { self.sleep_gap_ns };
        for i in 0..self.n_lat {
            let seq = self.n_thr + i;
            encode(seq, &mut m);
            tx.send(&m);
            wait_for(&mut child, "a latency message", limit, || ctl.done.load(Ordering::Acquire) == seq + 1);
            spin_until(now_ns() + gap);
        }

        let out = child.stdout.take().expect("stdout");
        let mut line = None;
        for l in BufReader::new(out).lines() {
            let l = l.expect("consumer stdout");
            if let Some(rest) = l.strip_prefix("@@ lat ") {
                line = Some(rest.to_string());
            }
        }
        let st = child.wait().expect("wait consumer");
        assert!(st.success(), "consumer failed: {st}");
        if let (Tx::Mq(mq), Some(c)) = (&tx, mq_name) {
            // SAFETY: closing and unlinking the queue we created.
            unsafe {
                libc::mq_close(*mq);
                libc::mq_unlink(c.as_ptr());
            }
        }
        drop(tx);
        let _ = std::fs::remove_file(&ctl_path);
        let v: Vec<u64> = line
            .expect("consumer printed no latency line")
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        Run { mps, send_mps, p50: v[1], p99: v[2], p999: v[3] }
    }
}

fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn median_u(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// The deepest POSIX queue of 64-byte messages we may create: [`MQ_DEPTH`], else the
/// system's `msg_max` (unprivileged processes are capped there).
fn mq_depth() -> i64 {
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
fn line_handoff_ns(rounds: u64) -> f64 {
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
    let t0 = now_ns();
    for i in 0..rounds {
        word.store(2 * i + 1, Ordering::Release);
        while word.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let ns = (now_ns() - t0) as f64 / (2 * rounds) as f64;
    t.join().expect("ping-pong thread");
    ns
}

/// Single-process costs, to explain the cross-process figures: push; steal + payload +
/// ack; both in one thread (the cache lines never leave this core); a clock read.
fn calibrate(owner: &OwnerHandle, client: &Client) -> Vec<(&'static str, f64)> {
    let thief = client.attach_thief(QUEUE).expect("attach_thief");
    let n = 50_000u64;
    let mut out = Vec::new();
    if ncpus() >= 2 {
        out.push(("cache-line hand-off CPU 0 <-> 1, one way", line_handoff_ns(200_000)));
    }
    let m = [0xabu8; MSG];
    let mut v = Vec::with_capacity(MSG);
    let t = now_ns();
    for _ in 0..n {
        let _ = now_ns();
    }
    out.push(("clock_gettime(CLOCK_MONOTONIC)", (now_ns() - t) as f64 / n as f64));
    let t = now_ns();
    for _ in 0..n {
        owner.push(&m).expect("push");
    }
    out.push(("push, 64 B (same core)", (now_ns() - t) as f64 / n as f64));
    let t = now_ns();
    for _ in 0..n {
        let j = thief.steal().expect("steal").expect("a job");
        v.clear();
        j.read_payload(&mut v).expect("payload");
        j.ack().expect("ack");
    }
    out.push(("steal + payload + ack (same core)", (now_ns() - t) as f64 / n as f64));
    let t = now_ns();
    for _ in 0..n {
        owner.push(&m).expect("push");
        let j = thief.steal().expect("steal").expect("a job");
        v.clear();
        j.read_payload(&mut v).expect("payload");
        j.ack().expect("ack");
    }
    out.push(("push -> steal -> ack round, one thread", (now_ns() - t) as f64 / n as f64));
    out
}

fn main() {
    if std::env::var_os("XTCQ_BENCH_ROLE").is_some() {
        consumer();
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing we need to act on.
    let quick = std::env::var("XTCQ_BENCH_QUICK").is_ok_and(|v| v != "0");
    let n_thr = env_u64("XTCQ_BENCH_N").unwrap_or(if quick { 200_000 } else { 1_000_000 });
    let n_lat = env_u64("XTCQ_BENCH_N_LAT").unwrap_or(if quick { 3_000 } else { 20_000 });
    let runs = env_u64("XTCQ_BENCH_RUNS").unwrap_or(if quick { 1 } else { 3 }) as u32;
    let only = std::env::var("XTCQ_BENCH_ONLY").ok();
    let sleep_gap_ns = env_u64("XTCQ_BENCH_GAP_US").unwrap_or(50) * 1000;

    let daemon = Daemon::start(Path::new(env!("CARGO_BIN_EXE_xtcq-test-daemon")), SIZES);
    pin(0); // after starting the daemon, which should not be pinned with us
    let client = daemon.client();
    let mut params = QueueParams::new(QUEUE);
    params.deques = 1;
    params.capacity = 65536;
    params.flavor = Flavor::Fifo;
    client.create_queue(&params).expect("create queue");
    let owner = client.attach_owner(QUEUE).expect("attach_owner");
    let cal = calibrate(&owner, &client);
    let bench =
        Bench { owner, _client: client, daemon, n_thr, n_lat, mq_depth: mq_depth(), runs, sleep_gap_ns };

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    println!(
        "ipc_handoff: {} CPUs ({cpu}), 64-byte messages, {} throughput + {} latency messages per run, \
         median of {} run(s){}; POSIX mq depth {}",
        ncpus(),
        n_thr,
        n_lat,
        runs,
        if quick { " (quick)" } else { "" },
        bench.mq_depth
    );
    for (what, ns) in &cal {
        println!("  per op: {what:<40} {ns:>7.1} ns");
    }
    println!();
    println!(
        "| {:<11} | {:<34} | {:>12} | {:>10} | {:>8} | {:>8} | {:>9} |",
        "transport", "consumer", "M msgs/s", "sender M/s", "p50 µs", "p99 µs", "p99.9 µs"
    );
    println!("|{:-<13}|{:-<36}|{:->14}|{:->12}|{:->10}|{:->10}|{:->11}|", "", "", ":", ":", ":", ":", ":");
    let handoff_before = if ncpus() >= 2 { line_handoff_ns(200_000) } else { 0.0 };
    for transport in [Transport::Xtcq, Transport::Pipe, Transport::Unix, Transport::Mq] {
        if only.as_deref().is_some_and(|o| !o.split(',').any(|x| x == transport.name())) {
            continue;
        }
        if transport == Transport::Mq && bench.mq_depth == 0 {
            println!("| {:<11} | skipped: cannot create a POSIX message queue here |", transport.name());
            continue;
        }
        let modes: &[(bool, usize)] = if transport == Transport::Xtcq {
            &[(true, 1), (true, 32), (false, 1)]
        } else {
            &[(true, 1), (false, 1)]
        };
        for &(spin, batch) in modes {
            let runs: Vec<Run> = (0..bench.runs).map(|k| bench.one(transport, spin, batch, k)).collect();
            let how = match (transport, spin) {
                (Transport::Xtcq, true) if batch > 1 => "spinning on steal_batch(32)",
                (Transport::Xtcq, true) => "spinning on steal",
                (Transport::Xtcq, false) => "asleep in steal_wait (futex)",
                (Transport::Mq, true) => "spinning, O_NONBLOCK mq_receive",
                (Transport::Mq, false) => "asleep in mq_receive",
                (_, true) => "spinning, O_NONBLOCK read",
                (_, false) => "asleep in read",
            };
            println!(
                "| {:<11} | {:<34} | {:>12.2} | {:>10.2} | {:>8.2} | {:>8.2} | {:>9.2} |",
                transport.name(),
                how,
                median_f(runs.iter().map(|r| r.mps).collect()),
                median_f(runs.iter().map(|r| r.send_mps).collect()),
                median_u(runs.iter().map(|r| r.p50).collect()) as f64 / 1e3,
                median_u(runs.iter().map(|r| r.p99).collect()) as f64 / 1e3,
                median_u(runs.iter().map(|r| r.p999).collect()) as f64 / 1e3,
            );
        }
    }
    if ncpus() >= 2 {
        // The host places the two vCPUs of a VM where it likes; this figure (cheap: ~30 ns,
        // same core complex; dear: ~150 ns, across) moves every cross-core figure above.
        println!(
            "\ncache-line hand-off CPU 0 <-> 1, one way: {:.0} ns before the table, {:.0} ns after",
            handoff_before,
            line_handoff_ns(200_000)
        );
    }
}
