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
