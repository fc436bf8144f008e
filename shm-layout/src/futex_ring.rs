//! A futex wait an event loop can poll: an io_uring holding one `IORING_OP_FUTEX_WAIT` on a
//! queue's wait word (Linux 6.7 and later). The ring's descriptor becomes readable when the
//! wait ends, so a consumer asleep in an epoll (PostgreSQL's `WaitEventSet`, tokio, asyncio) is
//! woken by the producer's one `FUTEX_WAKE`, exactly as a consumer asleep in `FUTEX_WAIT`:
//! no socket, no name anyone could reach, and the kernel's wake-one.
//!
//! Rules kept:
//! - **at most one wait in flight** (a second `wait` while one is in flight keeps the first),
//!   tagged with a number never reused; a completion with another tag is a stale one (a
//!   cancelled wait's) and only consumed;
//! - **a disarm leaves no wait behind**: a wait that did not end is cancelled before the
//!   disarm returns, so a later `FUTEX_WAKE 1` can never go to a waiter that stopped waiting
//!   (which would be a lost wake for one still asleep). Whether the wait was woken is read
//!   from its completion, or, when that is not posted yet, from the cancel's: "not found"
//!   means a wake dequeued it first;
//! - the completion is posted by the submitting thread (io_uring's task work): a thread that
//!   exits cancels its waits (a spurious readiness, never a missed one), and a thread asleep
//!   in `epoll_wait` when its wait is woken returns `EINTR` once before the readiness shows
//!   (every event loop retries it);
//! - no thread, no signal handler; the ring's descriptor is close-on-exec (the kernel makes
//!   it so); no `IORING_SETUP_SINGLE_ISSUER` (any thread of the process may use the ring, one
//!   at a time: the caller serialises);
//! - nothing read from the ring's shared pages is trusted beyond its index masks.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use memmap2::{MmapOptions, MmapRaw};
use rustix::io_uring::{
    io_uring_enter, io_uring_params, io_uring_setup, IoringEnterFlags, IoringFeatureFlags,
};

const OP_FUTEX_WAIT: u8 = 51;
const OP_ASYNC_CANCEL: u8 = 14;
/// `FUTEX2_SIZE_U32`, and not `FUTEX2_PRIVATE`: the producers are other processes.
const FUTEX2_SIZE_U32: i32 = 0x02;
const FUTEX_BITSET_MATCH_ANY: u64 = 0xffff_ffff;
/// Tags of cancels have this bit; waits' tags do not.
const CANCEL_TAG: u64 = 1 << 63;

/// One submission entry, as the kernel lays it out (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Sqe {
    opcode: u8,
    flags: u8,
    ioprio: u16,
    fd: i32,
    off_or_addr2: u64,
    addr: u64,
    len: u32,
    op_flags: u32,
    user_data: u64,
    buf_index: u16,
    personality: u16,
    splice_fd_in: i32,
    addr3: u64,
    _pad: u64,
}

/// One completion entry (16 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
struct Cqe {
    user_data: u64,
    res: i32,
    _flags: u32,
}

/// How a wait in flight ended, as the disarm found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// Nothing was in flight, or the wait was cancelled before any wake reached it, or it
    /// ended without a wake (the word had moved; its thread exited).
    Quiet,
    /// A `FUTEX_WAKE` dequeued it: this waiter took a wake.
    Woken,
}

/// An io_uring with at most one futex wait in flight. Not `Sync`: the caller serialises.
pub struct FutexRing {
    fd: OwnedFd,
    rings: MmapRaw,
    sqes: MmapRaw,
    sq: Offsets,
    cq: Offsets,
    cqes: usize,
    sq_array: usize,
    next_tag: u64,
    in_flight: Option<u64>,
    /// How the last wait ended, once its completion was reaped (until a disarm takes it).
    ended: Option<WaitEnd>,
}

/// Byte offsets of one ring's words in the shared mapping.
#[derive(Clone, Copy)]
struct Offsets {
    head: usize,
    tail: usize,
    mask: usize,
}

impl std::fmt::Debug for FutexRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FutexRing").field("in_flight", &self.in_flight).finish()
    }
}

impl AsFd for FutexRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn unsupported(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, format!("io_uring futex waits are not available: {what}"))
}

impl FutexRing {
    /// A ring whose futex waits work here: fails (`Unsupported`, `PermissionDenied`, ...)
    /// where io_uring is missing, disabled (`kernel.io_uring_disabled`, a seccomp profile) or
    /// older than `IORING_OP_FUTEX_WAIT`, which a probe wait finds out.
    pub fn new() -> io::Result<FutexRing> {
        let mut p = io_uring_params::default();
        // SAFETY: no ATTACH_WQ flag, so no descriptor in `p` is read.
        let fd = unsafe { io_uring_setup(4, &mut p) }.map_err(|e| {
            // A bare "Operation not permitted" names neither io_uring nor the reason.
            let why = match e {
                rustix::io::Errno::PERM => " (kernel.io_uring_disabled, or a seccomp profile)",
                rustix::io::Errno::NOSYS => " (a kernel without io_uring, or a seccomp profile)",
                _ => "",
            };
            io::Error::new(
                io::Error::from(e).kind(),
                format!("io_uring futex waits are not available: io_uring_setup: {e}{why}"),
            )
        })?;
        if !p.features.contains(IoringFeatureFlags::SINGLE_MMAP) {
            return Err(unsupported("the kernel lacks IORING_FEAT_SINGLE_MMAP"));
        }
        let sq_len = p.sq_off.array as usize + p.sq_entries as usize * 4;
        let cq_len = p.cq_off.cqes as usize + p.cq_entries as usize * std::mem::size_of::<Cqe>();
        let rings = MmapOptions::new()
            .offset(rustix::io_uring::IORING_OFF_SQ_RING)
            .len(sq_len.max(cq_len))
            .populate()
            .map_raw(&fd)?;
        let sqes = MmapOptions::new()
            .offset(rustix::io_uring::IORING_OFF_SQES)
            .len(p.sq_entries as usize * std::mem::size_of::<Sqe>())
            .populate()
            .map_raw(&fd)?;
        let mut ring = FutexRing {
            fd,
            rings,
            sqes,
            sq: Offsets {
                head: p.sq_off.head as usize,
                tail: p.sq_off.tail as usize,
                mask: p.sq_off.ring_mask as usize,
            },
            cq: Offsets {
                head: p.cq_off.head as usize,
                tail: p.cq_off.tail as usize,
                mask: p.cq_off.ring_mask as usize,
            },
            cqes: p.cq_off.cqes as usize,
            sq_array: p.sq_off.array as usize,
            next_tag: 1,
            in_flight: None,
            ended: None,
        };
        ring.probe()?;
        Ok(ring)
    }

    /// Submits a wait on a word that does not hold the value waited for: a kernel that knows
    /// the operation ends it at once with `EAGAIN`; one that does not, with `EINVAL`.
    fn probe(&mut self) -> io::Result<()> {
        let word = AtomicU32::new(0);
        self.wait(&word, 1)?;
        let tag = self.in_flight.unwrap_or(0);
        let res = self.wait_for_completion(tag)?;
        self.ended = None;
        match -res {
            e if e == libc::EAGAIN => Ok(()),
            e if e == libc::EINVAL => {
                Err(unsupported("the kernel predates IORING_OP_FUTEX_WAIT (Linux 6.7)"))
            }
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `off` is one of the kernel's offsets into the ring mapping, which is at
        // least that long plus 4 (the kernel sized it), aligned to 4 and live as long as self;
        // the kernel writes these words concurrently, hence atomics.
        unsafe { &*(self.rings.as_ptr().add(off) as *const AtomicU32) }
    }

    /// Starts a wait on `word` while it holds `expected`: the descriptor becomes readable when
    /// a `FUTEX_WAKE` on it dequeues the wait, or at once if `word` no longer holds
    /// `expected`. With a wait already in flight (two threads sharing one descriptor, one
    /// arming after the other), that one serves: a second would be queued untracked, and no
    /// disarm would cancel it.
    pub fn wait(&mut self, word: &AtomicU32, expected: u32) -> io::Result<()> {
        if self.in_flight.is_some() {
            return Ok(());
        }
        self.ended = None;
        let tag = self.next_tag;
        self.next_tag = (self.next_tag + 1) & !CANCEL_TAG;
        let sqe = Sqe {
            opcode: OP_FUTEX_WAIT,
            fd: FUTEX2_SIZE_U32,
            addr: word as *const AtomicU32 as u64,
            off_or_addr2: u64::from(expected),
            addr3: FUTEX_BITSET_MATCH_ANY,
            user_data: tag,
            ..Sqe::default()
        };
        self.submit(sqe, 0)?;
        self.in_flight = Some(tag);
        Ok(())
    }

    /// Queues `sqe` and enters the kernel with it (waiting for `min_complete` completions).
    fn submit(&mut self, sqe: Sqe, min_complete: u32) -> io::Result<()> {
        let tail = self.word(self.sq.tail).load(Ordering::Relaxed);
        let head = self.word(self.sq.head).load(Ordering::Acquire);
        let mask = self.word(self.sq.mask).load(Ordering::Relaxed);
        if tail.wrapping_sub(head) > mask {
            return Err(io::Error::other("the io_uring's submission queue is full"));
        }
        let idx = (tail & mask) as usize;
        // SAFETY: idx <= mask < sq_entries, the SQE array and the index array hold sq_entries
        // entries each; the kernel reads slot idx only after the tail store below (Release).
        unsafe {
            (self.sqes.as_mut_ptr() as *mut Sqe).add(idx).write(sqe);
            (self.rings.as_mut_ptr().add(self.sq_array) as *mut u32).add(idx).write(idx as u32);
        }
        // Release: the entry is written before the kernel can see the new tail.
        self.word(self.sq.tail).store(tail.wrapping_add(1), Ordering::Release);
        let flags = if min_complete > 0 { IoringEnterFlags::GETEVENTS } else { IoringEnterFlags::empty() };
        loop {
            // SAFETY: the entry points at `word` (a live futex word the caller keeps mapped
            // while the wait is in flight, see `WakeFd`) or at nothing (a cancel).
            match unsafe { io_uring_enter(&self.fd, 1, min_complete, flags) } {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    // Nothing was submitted (an error is returned only then): take the entry
                    // back, or the next enter would submit it in place of its own. Safe: the
                    // kernel reads the queue only inside an enter (no SQPOLL thread).
                    if self.word(self.sq.head).load(Ordering::Acquire) == tail {
                        self.word(self.sq.tail).store(tail, Ordering::Release);
                    }
                    return Err(e.into());
                }
            }
        }
    }

    /// The next completion, if one is posted.
    fn reap(&mut self) -> Option<Cqe> {
        let head = self.word(self.cq.head).load(Ordering::Relaxed);
        // Acquire: the entry is written before the kernel moved the tail.
        let tail = self.word(self.cq.tail).load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        let mask = self.word(self.cq.mask).load(Ordering::Relaxed);
        let idx = (head & mask) as usize;
        // SAFETY: idx <= mask < cq_entries; the CQE array holds cq_entries entries.
        let cqe = unsafe { (self.rings.as_ptr().add(self.cqes) as *const Cqe).add(idx).read() };
        // Release: the entry is read before the kernel may reuse it.
        self.word(self.cq.head).store(head.wrapping_add(1), Ordering::Release);
        if Some(cqe.user_data) == self.in_flight {
            self.in_flight = None;
            self.ended = Some(if cqe.res == 0 { WaitEnd::Woken } else { WaitEnd::Quiet });
        }
        Some(cqe)
    }

    /// Consumes every completion posted: the descriptor is then not readable, until one more
    /// arrives.
    pub fn drain(&mut self) {
        while self.reap().is_some() {}
    }

    /// Ends the wait in flight, if any: whether it took a wake. After it, no wait of this
    /// ring is queued on any futex.
    pub fn disarm(&mut self) -> io::Result<WaitEnd> {
        self.drain();
        let Some(tag) = self.in_flight else { return Ok(self.ended.take().unwrap_or(WaitEnd::Quiet)) };
        let cancel =
            Sqe { opcode: OP_ASYNC_CANCEL, fd: -1, addr: tag, user_data: tag | CANCEL_TAG, ..Sqe::default() };
        self.submit(cancel, 1)?;
        let res = self.wait_for_completion(tag | CANCEL_TAG)?;
        // The wait's own completion is posted by the thread that submitted it, maybe later
        // (a stale one then, skipped); when it came already, it says exactly how it ended.
        self.in_flight = None;
        Ok(self.ended.take().unwrap_or(if res >= 0 {
            // Found and dequeued before any wake could take it (the count of waits cancelled
            // on some kernels, 0 on others).
            WaitEnd::Quiet
        } else {
            // Not found (ENOENT) or being completed (EALREADY): a wake dequeued it first.
            // (Were it ended by its thread's exit instead, the caller hands on a wake nobody
            // needed: a spurious one.)
            WaitEnd::Woken
        }))
    }

    /// Waits until the completion tagged `tag` is posted; its result.
    fn wait_for_completion(&mut self, tag: u64) -> io::Result<i32> {
        loop {
            while let Some(c) = self.reap() {
                if c.user_data == tag {
                    return Ok(c.res);
                }
            }
            // SAFETY: no entry is submitted; this only waits for completions.
            match unsafe { io_uring_enter(&self.fd, 0, 1, IoringEnterFlags::GETEVENTS) } {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> Option<FutexRing> {
        match FutexRing::new() {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("SKIPPED: {e}");
                None
            }
        }
    }

    fn readable(fd: BorrowedFd<'_>, ms: i32) -> bool {
        let mut p = [rustix::event::PollFd::from_borrowed_fd(fd, rustix::event::PollFlags::IN)];
        let t = rustix::time::Timespec {
            tv_sec: i64::from(ms / 1000),
            tv_nsec: i64::from(ms % 1000) * 1_000_000,
        };
        rustix::event::poll(&mut p, Some(&t)).unwrap_or(0) > 0
    }

    fn wake(word: &AtomicU32, n: u32) -> usize {
        rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), n).unwrap_or(0)
    }

    #[test]
    fn a_futex_wake_makes_the_ring_readable_and_the_disarm_says_woken() {
        let Some(mut r) = ring() else { return };
        let word = AtomicU32::new(7);
        r.wait(&word, 7).unwrap();
        assert!(!readable(r.as_fd(), 20), "readable before any wake");
        assert_eq!(wake(&word, 1), 1, "the ring's wait is a futex waiter");
        assert!(readable(r.as_fd(), 2000), "not readable after the wake");
        assert_eq!(r.disarm().unwrap(), WaitEnd::Woken);
        assert!(!readable(r.as_fd(), 20), "still readable after the disarm");
    }

    #[test]
    fn a_disarm_cancels_the_wait_so_a_later_wake_goes_to_nobody() {
        let Some(mut r) = ring() else { return };
        let word = AtomicU32::new(0);
        r.wait(&word, 0).unwrap();
        assert_eq!(r.disarm().unwrap(), WaitEnd::Quiet);
        assert_eq!(wake(&word, 1), 0, "a disarmed wait still took a wake");
        // And the ring arms again after a cancel.
        r.wait(&word, 0).unwrap();
        assert_eq!(wake(&word, 1), 1);
        assert!(readable(r.as_fd(), 2000));
        assert_eq!(r.disarm().unwrap(), WaitEnd::Woken);
    }

    #[test]
    fn a_word_that_moved_ends_the_wait_at_once_without_a_wake() {
        let Some(mut r) = ring() else { return };
        let word = AtomicU32::new(3);
        r.wait(&word, 2).unwrap();
        assert!(readable(r.as_fd(), 2000), "a stale expectation must not sleep");
        assert_eq!(r.disarm().unwrap(), WaitEnd::Quiet);
    }

    /// A tokio task can arm on one worker thread and be dropped on another: the cancel
    /// works from any thread, and the thread that armed may exit (its wait ends as a
    /// spurious readiness).
    #[test]
    fn another_thread_disarms_and_an_exited_thread_leaves_a_readiness_only() {
        let Some(r) = ring() else { return };
        let r = std::sync::Mutex::new(r);
        let word = AtomicU32::new(0);
        let (armed_tx, armed_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let (r, word, armed_tx) = (&r, &word, armed_tx);
            s.spawn(move || {
                r.lock().unwrap().wait(word, 0).unwrap();
                armed_tx.send(()).unwrap();
                let _ = stop_rx.recv();
            });
            armed_rx.recv().unwrap();
            assert_eq!(r.lock().unwrap().disarm().unwrap(), WaitEnd::Quiet);
            assert_eq!(wake(word, 1), 0, "a wait disarmed from another thread took a wake");
            stop_tx.send(()).unwrap();
        });
        std::thread::scope(|s| {
            s.spawn(|| r.lock().unwrap().wait(&word, 0).unwrap());
        });
        let mut r = r.into_inner().unwrap();
        assert!(readable(r.as_fd(), 2000), "the exited thread's wait ended with no readiness");
        assert_eq!(r.disarm().unwrap(), WaitEnd::Quiet);
        assert_eq!(wake(&word, 1), 0);
    }

    /// A second wait while one is in flight (two threads sharing a descriptor) keeps the
    /// first: one disarm then leaves nothing queued.
    #[test]
    fn a_second_wait_in_flight_is_not_queued_beside_the_first() {
        let Some(mut r) = ring() else { return };
        let word = AtomicU32::new(0);
        r.wait(&word, 0).unwrap();
        r.wait(&word, 0).unwrap();
        assert_eq!(r.disarm().unwrap(), WaitEnd::Quiet);
        assert_eq!(wake(&word, 2), 0, "a wait was left queued");
    }
}
