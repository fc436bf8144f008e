//! The consumer (child) side: what it receives with, and its role's main.

use super::*;

/// What a consumer receives with.
pub(crate) enum Rx<'a> {
    /// `batch` > 1: jobs come `batch` at a time into `jobs`, `next` is the next to run, and a
    /// batch is acked at once when it is done (`ack_all`), before the next steal.
    Xtcq {
        thief: &'a xtcq_client::ThiefHandle,
        buf: Vec<u8>,
        batch: usize,
        jobs: JobBatch<'a>,
        next: usize,
    },
    Stream {
        fd: RawFd,
        buf: Vec<u8>,
        start: usize,
        end: usize,
    },
    Mq {
        mq: libc::mqd_t,
        buf: Vec<u8>,
    },
    Redis {
        conn: resp::Conn,
        key: Vec<u8>,
        buf: Vec<u8>,
    },
}

impl Rx<'_> {
    /// Settles what is still held: a batch's last jobs are acked (left unsettled, they would
    /// be nacked back into the queue for the next run to find).
    pub(crate) fn finish(&mut self) {
        if let Rx::Xtcq { jobs, .. } = self {
            jobs.ack_all().expect("ack_all");
        }
    }

    /// Receives one message (spinning or sleeping as set up), hands its `(seq, ts)` and the
    /// time it arrived to `f`, then acks it.
    pub(crate) fn recv(&mut self, spin: bool, f: &mut impl FnMut(u64, u64)) {
        match self {
            Rx::Xtcq { thief, buf, batch, jobs, next } if *batch > 1 => {
                while *next >= jobs.len() {
                    jobs.ack_all().expect("ack_all");
                    *next = 0;
                    if thief.steal_into(*batch, jobs).expect("steal_into") == 0 {
                        std::hint::spin_loop();
                    }
                }
                buf.clear();
                jobs.read_payload(*next, buf).expect("payload");
                assert_eq!(buf.len(), MSG, "payload length");
                let (seq, ts) = decode(buf);
                f(seq, ts);
                *next += 1;
            }
            Rx::Xtcq { thief, buf, .. } => {
                let job = loop {
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
            Rx::Redis { conn, key, buf } => {
                if spin {
                    // A spinning Redis consumer can only ask again: every look is a round trip.
                    loop {
                        conn.queue(&[b"RPOP", key]);
                        conn.flush().unwrap_or_else(|e| panic!("redis RPOP: {e}"));
                        if conn.read_bulk(buf).unwrap_or_else(|e| panic!("redis RPOP: {e}")) {
                            break;
                        }
                        std::hint::spin_loop();
                    }
                } else {
                    conn.queue(&[b"BRPOP", key, b"0"]);
                    conn.flush().unwrap_or_else(|e| panic!("redis BRPOP: {e}"));
                    conn.read_brpop(buf).unwrap_or_else(|e| panic!("redis BRPOP: {e}"));
                }
                assert_eq!(buf.len(), MSG, "redis payload length");
                let (seq, ts) = decode(buf);
                f(seq, ts);
            }
        }
    }
}

pub(crate) fn consumer() {
    pin(1.min(ncpus() - 1));
    let transport = Transport::parse(&std::env::var("XTCQ_BENCH_TRANSPORT").expect("transport"));
    let spin = std::env::var("XTCQ_BENCH_MODE").expect("mode") == "spin";
    let n_thr = env_u64("XTCQ_BENCH_N_THR").expect("n_thr");
    let n_lat = env_u64("XTCQ_BENCH_N_LAT").expect("n_lat");
    let ctl = SharedPage::<Ctl>::open(Path::new(&std::env::var_os("XTCQ_BENCH_CTL").expect("ctl")), false);
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
                jobs: JobBatch::new(),
                next: 0,
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
        Transport::Redis => {
            let socket = PathBuf::from(std::env::var_os("XTCQ_BENCH_REDIS_SOCKET").expect("redis socket"));
            let conn = resp::Conn::connect(&socket)
                .unwrap_or_else(|e| panic!("consumer: connect to redis at {}: {e}", socket.display()));
            let key = std::env::var("XTCQ_BENCH_REDIS_KEY").expect("redis key").into_bytes();
            Rx::Redis { conn, key, buf: Vec::with_capacity(MSG) }
        }
    };
    ctl.ready.store(1, Ordering::Release);

    // Throughput: N messages, each sequence number exactly once (a bitmap: a loss and a
    // duplicate cannot cancel out as they can in a sum).
    let mut seen = vec![0u64; (n_thr as usize).div_ceil(64)];
    for _ in 0..n_thr {
        rx.recv(spin, &mut |seq, _| {
            assert!(seq < n_thr, "throughput phase: message {seq} was never sent");
            let (w, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
            assert!(seen[w] & bit == 0, "throughput phase: message {seq} received twice");
            seen[w] |= bit;
        });
    }
    // n_thr distinct numbers below n_thr: every one of them, once.
    ctl.t_end.store(monotonic_ns(), Ordering::Relaxed);
    ctl.done.store(n_thr, Ordering::Release);

    // Latency: one at a time.
    let mut lat = Vec::with_capacity(n_lat as usize);
    for i in 0..n_lat {
        let mut got = (0, 0);
        rx.recv(spin, &mut |seq, ts| got = (seq, monotonic_ns().saturating_sub(ts)));
        assert_eq!(got.0, n_thr + i, "latency phase: out of order");
        lat.push(got.1);
        ctl.done.store(n_thr + i + 1, Ordering::Release);
    }
    rx.finish();
    if lat.is_empty() {
        println!("@@ lat 0 0 0 0 0");
        return;
    }
    lat.sort_unstable();
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!("@@ lat {} {} {} {} {}", lat.len(), q(0.5), q(0.99), q(0.999), lat[lat.len() - 1]);
}
