//! Sleeping until a queue has work: a futex on the queue's wait word.
//!
//! The futex is never `FUTEX_PRIVATE_FLAG`: a private wake only reaches waiters of the same
//! mm, and our waiters are other processes mapping the same file (the kernel keys shared
//! futexes by inode and offset, so different mapping addresses meet).
//!
//! No lost wake-ups, and no system call on a push when nobody sleeps:
//!
//! ```text
//!  consumer                                   producer
//!  s = seq (Acquire)                          publish the job (Release store of bottom)
//!  sleepers += 1 (SeqCst)                     fence(SeqCst)
//!  look for work again  -> found: leave       if sleepers > 0 { seq += 1; FUTEX_WAKE(seq) }
//!  FUTEX_WAIT(seq, s, timeout)
//!  sleepers -= 1
//! ```
//!
//! The `sleepers` increment and the producer's fence make a Dekker pair: either the producer
//! sees the sleeper, or the consumer's second look sees the job. If the producer sees it, it
//! bumps `seq` after the consumer read `s`, so `FUTEX_WAIT` returns at once (the kernel
//! compares under its bucket lock) or is woken.

use std::time::Instant;

use crate::layout::WaitWord;
use crate::sync::{fence, Ordering};

/// Called by a producer after it published work.
#[inline]
pub fn notify(w: &WaitWord) {
    // Pairs with the consumer's SeqCst increment of `sleepers` (see the module comment).
    fence(Ordering::SeqCst);
    if w.sleepers.load(Ordering::Relaxed) != 0 {
        notify_sleepers(w);
    }
}

#[cold]
fn notify_sleepers(w: &WaitWord) {
    w.seq.fetch_add(1, Ordering::Release);
    // Errors (EFAULT cannot happen for a live reference) are ignored: a sleeper that is not
    // woken still returns at its timeout.
    let _ = rustix::thread::futex::wake(&w.seq, rustix::thread::futex::Flags::empty(), i32::MAX as u32);
}

/// Calls `poll` until it yields something, sleeping on `w` between tries, until `deadline`
/// (`None`: forever). `Ok(None)` means the deadline passed.
pub fn wait_for<T, E>(
    w: &WaitWord,
    deadline: Option<Instant>,
    mut poll: impl FnMut() -> Result<Option<T>, E>,
) -> Result<Option<T>, E> {
    loop {
        if let Some(v) = poll()? {
            return Ok(Some(v));
        }
        let s = w.seq.load(Ordering::Acquire);
        w.sleepers.fetch_add(1, Ordering::SeqCst);
        let found = poll();
        let sleep = matches!(&found, Ok(None));
        let timed_out = if sleep {
            let timeout = match deadline {
                None => None,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        w.sleepers.fetch_sub(1, Ordering::Release);
                        return Ok(None);
                    }
                    let left = d - now;
                    Some(rustix::time::Timespec {
                        tv_sec: left.as_secs() as _,
                        tv_nsec: left.subsec_nanos() as _,
                    })
                }
            };
            // EAGAIN (seq moved), EINTR and ETIMEDOUT all mean: look again.
            let _ = rustix::thread::futex::wait(
                &w.seq,
                rustix::thread::futex::Flags::empty(),
                s,
                timeout.as_ref(),
            );
            deadline.is_some_and(|d| Instant::now() >= d)
        } else {
            false
        };
        w.sleepers.fetch_sub(1, Ordering::Release);
        match found {
            Ok(Some(v)) => return Ok(Some(v)),
            Err(e) => return Err(e),
            Ok(None) if timed_out => return poll(),
            Ok(None) => {}
        }
    }
}
