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
//!  look for work, yielding, for 20 µs
//!  s = seq (Acquire)                          publish the job (Release store of bottom)
//!  sleepers += 1 (SeqCst)                     fence(SeqCst)
//!  look for work again  -> found: leave       if sleepers > 0 { seq += 1; FUTEX_WAKE(seq, 1) }
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
    // One sleeper per notify: every notify stands for one job made available (a push, a
    // re-queue), and one consumer can take it. Waking them all made every sleeper run for
    // each job (a herd). No wake-up is lost by it: a sleeper still in the kernel's queue is
    // woken by the next job's notify, and one on its way there finds `seq` changed and looks
    // again. Errors (EFAULT cannot happen for a live reference) are ignored: a sleeper that
    // is not woken still returns at its timeout.
    let _ = rustix::thread::futex::wake(&w.seq, rustix::thread::futex::Flags::empty(), 1);
}

/// Wakes every sleeper, for a change all of them must see (the segment was retired).
#[cold]
pub fn wake_all(w: &WaitWord) {
    w.seq.fetch_add(1, Ordering::Release);
    let _ = rustix::thread::futex::wake(&w.seq, rustix::thread::futex::Flags::empty(), i32::MAX as u32);
}

/// How long a consumer keeps looking, yielding its CPU between looks, before it sleeps. A
/// sleeper costs every push a `FUTEX_WAKE`; a stream of jobs arriving every few µs would
/// otherwise put the consumers to sleep between jobs and make the producer pay a system call
/// for each. Short enough that an idle consumer is asleep within tens of µs.
const LOOK_BEFORE_SLEEP: std::time::Duration = std::time::Duration::from_micros(20);

/// The longest one futex sleep lasts before the sleeper looks again (an idle consumer pays
/// one wake-up per slice).
const SLICE: std::time::Duration = std::time::Duration::from_secs(1);

/// Calls `poll` until it yields something, sleeping on `w` between tries, until `deadline`
/// (`None`: forever). `Ok(None)` means the deadline passed.
pub fn wait_for<T, E>(
    w: &WaitWord,
    deadline: Option<Instant>,
    mut poll: impl FnMut() -> Result<Option<T>, E>,
) -> Result<Option<T>, E> {
    loop {
        // The clock is read only once a look found nothing: a consumer that finds a job at
        // once (the common case under load) pays no clock read for the wait.
        let mut look_until = None;
        loop {
            if let Some(v) = poll()? {
                return Ok(Some(v));
            }
            let now = Instant::now();
            let until = *look_until.get_or_insert(now + LOOK_BEFORE_SLEEP);
            if now >= until || deadline.is_some_and(|d| now >= d) {
                break;
            }
            std::thread::yield_now();
        }
        let s = w.seq.load(Ordering::Acquire);
        w.sleepers.fetch_add(1, Ordering::SeqCst);
        let found = poll();
        let sleep = matches!(&found, Ok(None));
        let timed_out = if sleep {
            // Never longer than one slice: a wake-up that can never come (the segment's file
            // was truncated, so no wake reaches this futex) must not leave the sleeper asleep
            // for good; the next look then sees the segment retired.
            let timeout = match deadline {
                None => SLICE,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        w.sleepers.fetch_sub(1, Ordering::Release);
                        return Ok(None);
                    }
                    (d - now).min(SLICE)
                }
            };
            let timeout = rustix::time::Timespec {
                tv_sec: timeout.as_secs() as _,
                tv_nsec: timeout.subsec_nanos() as _,
            };
            // EAGAIN (seq moved), EINTR and ETIMEDOUT all mean: look again.
            let _ =
                rustix::thread::futex::wait(&w.seq, rustix::thread::futex::Flags::empty(), s, Some(&timeout));
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
