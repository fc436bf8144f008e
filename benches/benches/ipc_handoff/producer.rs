//! The producer (parent) side: what it sends with.

use super::*;

/// What the producer sends with.
pub(crate) enum Tx<'a> {
    Xtcq(&'a OwnerHandle),
    Fd(OwnedFd),
    Mq(libc::mqd_t),
    Redis { conn: resp::Conn, key: Vec<u8> },
}

impl Tx<'_> {
    pub(crate) fn send(&mut self, m: &[u8; MSG]) {
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
            Tx::Redis { conn, key } => {
                // The reply is read before the next push: a producer that wants to know its
                // job is queued, as a Redis job queue's client does.
                conn.queue(&[b"LPUSH", key, m]);
                conn.flush().unwrap_or_else(|e| panic!("redis LPUSH: {e}"));
                conn.read_int().unwrap_or_else(|e| panic!("redis LPUSH: {e}"));
            }
        }
    }

    /// Redis only: messages `seqs` as `LPUSH`es in one write, then their replies.
    /// Queues `seqs` with `push_batch` (xtcq only): as many as the deque takes at a time, a
    /// full deque retried as a full queue is in `send`.
    pub(crate) fn send_batched(&mut self, seqs: std::ops::Range<u64>, bufs: &mut [[u8; MSG]]) {
        let Tx::Xtcq(owner) = self else { unreachable!("push_batch is for xtcq only") };
        let n = (seqs.end - seqs.start) as usize;
        for (buf, seq) in bufs.iter_mut().zip(seqs) {
            encode(seq, buf);
        }
        let refs: Vec<&[u8]> = bufs[..n].iter().map(|b| b.as_slice()).collect();
        let (mut done, mut tries) = (0, 0u32);
        while done < n {
            match owner.push_batch(&refs[done..]) {
                Ok(k) if k > 0 => done += k,
                Ok(_) | Err(xtcq_client::Error::RecordsFull(_)) => {
                    std::hint::spin_loop();
                    tries += 1;
                    assert!(tries < 1 << 28, "the queue stayed full: is the consumer alive?");
                }
                Err(e) => panic!("push_batch: {e}"),
            }
        }
    }

    pub(crate) fn send_pipelined(&mut self, seqs: std::ops::Range<u64>, m: &mut [u8; MSG]) {
        let Tx::Redis { conn, key } = self else { unreachable!("pipelining is for Redis only") };
        let n = seqs.end - seqs.start;
        for seq in seqs {
            encode(seq, m);
            conn.queue(&[b"LPUSH", key, m]);
        }
        conn.flush().unwrap_or_else(|e| panic!("redis LPUSH (pipelined): {e}"));
        for _ in 0..n {
            conn.read_int().unwrap_or_else(|e| panic!("redis LPUSH (pipelined): {e}"));
        }
    }
}

/// Opens `transport` for one run: the consumer's end goes to `cmd` (its stdin, or an
/// environment variable naming it), ours is returned, with a POSIX queue's name to unlink
/// once the run is over.
pub(crate) fn open_tx<'a>(
    bench: &'a Bench,
    transport: Transport,
    (spin, batch, k): (bool, usize, u32),
    cmd: &mut Command,
) -> (Tx<'a>, Option<std::ffi::CString>) {
    match transport {
        Transport::Xtcq => {
            cmd.stdin(Stdio::null());
            (Tx::Xtcq(&bench.owner), None)
        }
        Transport::Pipe | Transport::Unix => (fd_pair(transport == Transport::Pipe, cmd), None),
        Transport::Mq => {
            let name = format!("/xtcq-bench-{}-{}-{k}", std::process::id(), spin);
            let (tx, c) = posix_mq(&name, bench.mq_depth);
            cmd.env("XTCQ_BENCH_MQ", &name).stdin(Stdio::null());
            (tx, Some(c))
        }
        Transport::Redis => {
            let server = bench.redis.as_ref().expect("a redis transport without a server");
            let key = format!("xtcq-bench:{spin}:{batch}:{k}");
            let mut conn = resp::Conn::connect(&server.socket)
                .unwrap_or_else(|e| panic!("connect to redis at {}: {e}", server.socket.display()));
            conn.queue(&[b"DEL", key.as_bytes()]);
            conn.flush().and_then(|()| conn.read_int()).unwrap_or_else(|e| panic!("redis DEL: {e}"));
            cmd.env("XTCQ_BENCH_REDIS_SOCKET", &server.socket)
                .env("XTCQ_BENCH_REDIS_KEY", &key)
                .stdin(Stdio::null());
            (Tx::Redis { conn, key: key.into_bytes() }, None)
        }
    }
}

/// A pipe (or a Unix stream socket pair): the read end becomes the consumer's stdin.
fn fd_pair(pipe: bool, cmd: &mut Command) -> Tx<'static> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 / socketpair fill two fds, which we own from here on.
    let r = unsafe {
        if pipe {
            libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC)
        } else {
            libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr())
        }
    };
    assert_eq!(r, 0, "pipe/socketpair: {}", errno());
    // SAFETY: fresh fds from the call above.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    cmd.stdin(Stdio::from(rd));
    Tx::Fd(wr)
}

/// A new POSIX message queue `name` of `depth` 64-byte messages, opened for writing.
fn posix_mq(name: &str, depth: i64) -> (Tx<'static>, std::ffi::CString) {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: a zeroed mq_attr with the fields mq_open reads set; a NUL-terminated name; the
    // mode is passed as the variadic argument mq_open expects.
    let mq = unsafe {
        let mut attr: libc::mq_attr = std::mem::zeroed();
        attr.mq_maxmsg = depth;
        attr.mq_msgsize = MSG as i64;
        libc::mq_open(
            c.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
            &attr as *const libc::mq_attr,
        )
    };
    assert!(mq >= 0, "mq_open {name} depth {depth}: {}", errno());
    (Tx::Mq(mq), c)
}

/// Closes `tx`, and unlinks the POSIX queue named `mq_name` if it was one.
pub(crate) fn close_tx(tx: Tx<'_>, mq_name: Option<std::ffi::CString>) {
    if let (Tx::Mq(mq), Some(c)) = (&tx, mq_name) {
        // SAFETY: closing and unlinking the queue we created.
        unsafe {
            libc::mq_close(*mq);
            libc::mq_unlink(c.as_ptr());
        }
    }
}
