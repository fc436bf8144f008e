//! Sleeping until a queue has work: a futex on the queue's wait word, or a descriptor an event
//! loop polls; and waking one sleeper when work arrives (`wake_protocol` holds the protocol
//! both kinds share).
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
//!
//! A descriptor waiter's wake is a one-byte datagram sent to the Unix datagram socket the
//! daemon bound for it in its wake directory (`SOCKET.wake/QUEUE.BIT`, a directory only the
//! daemon creates entries in, reachable only by the daemon's users): nobody else can bind
//! that name first, and the directory and bit come from the daemon and the protocol, never
//! a path read from the segment.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Instant;

use crate::layout::WaitWord;
use crate::sync::Ordering;
use crate::wake_protocol::Wake;

/// Where this process sends descriptor wakes: the daemon's wake directory, and an unbound
/// datagram socket to send from.
#[derive(Debug)]
pub struct WakeDir {
    dir: PathBuf,
    sender: OwnedFd,
}

impl WakeDir {
    /// Sends descriptor wakes into `dir` (which the daemon named).
    pub fn open(dir: &Path) -> std::io::Result<WakeDir> {
        use rustix::net::{socket_with, AddressFamily, SocketFlags, SocketType};
        let sender = socket_with(
            AddressFamily::UNIX,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )?;
        Ok(WakeDir { dir: dir.to_path_buf(), sender })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The socket of descriptor waiter `bit` of queue-table entry `queue` in `dir`.
    pub fn socket_path(dir: &Path, queue: u32, bit: u32) -> PathBuf {
        dir.join(format!("{queue}.{bit}"))
    }

    /// Sends waiter `bit` of `queue` its wake; false when nobody is there to get it (the
    /// socket is gone: its waiter left or died).
    fn send(&self, queue: u32, bit: u32) -> bool {
        use rustix::net::{sendto, SendFlags, SocketAddrUnix};
        let Ok(addr) = SocketAddrUnix::new(Self::socket_path(&self.dir, queue, bit)) else { return false };
        match sendto(&self.sender, &[1u8], SendFlags::DONTWAIT | SendFlags::NOSIGNAL, &addr) {
            Ok(_) => true,
            // Its buffer is full of wakes it has not read: it is awake enough.
            Err(rustix::io::Errno::AGAIN) => true,
            Err(_) => false,
        }
    }
}

/// A queue's wait word, with what this process needs to wake its sleepers.
#[derive(Clone, Copy, Debug)]
pub struct Waker<'a> {
    /// The wait word.
    pub word: &'a WaitWord,
    /// The queue-table entry.
    pub queue: u32,
    /// The daemon's wake directory, when this process knows it (else descriptor waiters are
    /// left to the daemon's nudge, and a futex sleeper is woken).
    pub dir: Option<&'a WakeDir>,
    /// The queue's flow word (`layout::FLOW_PAUSED`): a paused queue wakes nobody.
    pub flow: &'a AtomicU32,
    /// The queue's `max_running` and `running` words (`segment::running`): a queue at its
    /// limit wakes nobody either.
    pub limit: (&'a AtomicU32, &'a AtomicU64),
    /// The queue's rate limit (`segment::rate`), read while the flow word says so.
    pub rate: &'a crate::layout::RateWords,
    /// This process slot's metrics block for the queue, when the waker belongs to a consumer
    /// ([`Waker::of_slot`]): its futex sleepers (`MetricsBlock::asleep`) and searchers
    /// (`MetricsBlock::searching`) on the queue are recorded there. One reference for both:
    /// the waker is copied into every handle's context, where it stays as wide as it was.
    pub slot: Option<&'a crate::layout::MetricsBlock>,
}

/// One futex sleep, from [`Waker::sleep_begins`] to [`Waker::sleep_ends`]: the generation of
/// the slot's sleeper record it was recorded under (`None`: not recorded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sleep {
    generation: Option<u32>,
}

impl Sleep {
    /// As one word, for a waiter that keeps its sleep in an atomic between arm and disarm.
    pub fn to_word(self) -> u64 {
        self.generation.map_or(u64::MAX, u64::from)
    }

    /// The sleep [`to_word`](Self::to_word) wrote.
    pub fn from_word(w: u64) -> Sleep {
        Sleep { generation: u32::try_from(w).ok() }
    }
}

/// A slot's sleeper record (`MetricsBlock::asleep`): how many of its futex sleepers are
/// counted in the queue's `sleepers` (low half), and how many times the daemon forgot them
/// (high half; zero in a segment written before it). A sleep ends off the count only under
/// the generation it began in.
pub(crate) fn asleep_count(v: u64) -> u64 {
    v & u64::from(u32::MAX)
}

/// The generation half of a sleeper record (see [`asleep_count`]).
pub(crate) fn asleep_generation(v: u64) -> u32 {
    (v >> 32) as u32
}

impl<'a> Waker<'a> {
    /// This waker, for a consumer of process slot `slot` of `seg`: its futex sleeps are
    /// recorded in the slot's block, so that the daemon can take them off the queue's count if
    /// the process dies asleep.
    pub fn of_slot(self, seg: &'a crate::segment::Segment, slot: u32) -> Waker<'a> {
        Waker { slot: seg.slot_metrics(self.queue, slot), ..self }
    }

    /// Tries to become one of the queue's searchers (at most [`search_bound`] look for work at
    /// once). Recorded for the slot first, then counted: a death between the two leaves the
    /// count one low, never one high (a high count could make a producer skip a sleeper; a
    /// low one only costs a wake, and the count never goes below zero).
    fn search_begins(&self) -> bool {
        if let Some(r) = self.slot.map(|b| &b.searching) {
            r.fetch_add(1, Ordering::Relaxed);
        }
        if self.word.searchers().begin(search_bound()) {
            crate::fail_point!("search.after_begin");
            return true;
        }
        if let Some(r) = self.slot.map(|b| &b.searching) {
            r.fetch_sub(1, Ordering::Relaxed);
        }
        false
    }

    /// A searcher stops searching (it took a job, gave up, or met an error): off the count
    /// first, then unrecorded (the order of errors of [`search_begins`](Self::search_begins)).
    /// True when it was the last searcher and jobs are left that a consumer could take now
    /// (`jobs_left`, on a queue neither closed nor out of rate tokens): producers skipped
    /// their wakes while it was counted, so the caller hands the search on (it took a job, or
    /// stops waiting: [`notify`]) or searches again (it gave up). Jobs of a closed queue wait
    /// for the event that opens it, which wakes a sleeper itself (read after the fence, as a
    /// push reads it: `notify_sleeper`), and a sleeper wakes for the next rate token.
    fn search_ends(&self, jobs_left: impl FnOnce() -> bool) -> bool {
        let last = self.word.searchers().end();
        if let Some(r) = self.slot.map(|b| &b.searching) {
            r.fetch_sub(1, Ordering::Relaxed);
        }
        last && !self.closed() && self.rate_wait_ns() == 0 && jobs_left()
    }

    /// A futex sleeper begins to sleep: counted in `sleepers` (the Dekker pair's increment),
    /// then recorded for its slot. A death between the two leaves the count one high, never
    /// one low (a low count could make a producer skip a sleeper). Give what it returns to
    /// [`sleep_ends`](Self::sleep_ends).
    #[must_use = "the sleep ends with `sleep_ends`, given this"]
    pub fn sleep_begins(&self) -> Sleep {
        self.word.sleepers().enter();
        let generation = self.slot.map(|b| asleep_generation(b.asleep.fetch_add(1, Ordering::Relaxed)));
        Sleep { generation }
    }

    /// A futex sleeper stops sleeping: unrecorded first, then off the count (the same order
    /// of errors as [`sleep_begins`](Self::sleep_begins)). A sleep the daemon already took
    /// off the count (it took the slot for dead: `recovery::forget_sleepers` moved the
    /// record's generation on) is not taken off again: that would take the count below the
    /// sleepers still asleep, and a producer would skip one of them.
    pub fn sleep_ends(&self, sleep: Sleep) {
        if let (Some(a), Some(generation)) = (self.slot.map(|b| &b.asleep), sleep.generation) {
            let ours = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                (asleep_generation(v) == generation && asleep_count(v) != 0).then(|| v - 1)
            });
            // Not ours: forgotten, or garbage an attached process wrote. Leaving the count
            // one high costs pushes a wake for nobody; one low could lose a wake.
            if ours.is_err() {
                return;
            }
        }
        self.word.sleepers().leave();
    }

    /// Whether the queue is paused: its consumers take nothing, so none is woken.
    #[inline]
    pub fn paused(&self) -> bool {
        self.flow.load(Ordering::Relaxed) & crate::layout::FLOW_PAUSED != 0
    }

    /// ns until the queue's rate limit lets a claim start (0: now, or no rate limit). Reads
    /// the clock only on a rated queue.
    pub fn rate_wait_ns(&self) -> u64 {
        if self.flow.load(Ordering::Acquire) & crate::layout::FLOW_RATED == 0 {
            return 0;
        }
        crate::segment::Rate::wait_ns(self.rate, crate::segment::monotonic_ns())
    }

    /// Whether a consumer would find the queue closed to it now: paused, or at its
    /// concurrency limit. (Out of tokens is not closed: the next token is a time, so a
    /// sleeper is woken to learn when.)
    #[inline]
    pub fn closed(&self) -> bool {
        let max = self.limit.0.load(Ordering::Relaxed);
        self.paused()
            || (max != 0 && crate::segment::Running::count(self.limit.1.load(Ordering::Relaxed)) >= max)
    }
}

/// Called by a producer after it published work: wakes a sleeper when one sleeps and nobody
/// searches (a searcher will find the work, and hands the search on to a sleeper if it leaves
/// work behind: `wake_protocol::Searchers`).
#[inline]
pub fn notify(w: Waker<'_>) {
    // `searching` is read only once a sleeper was seen: the push's path when nobody sleeps
    // is still the fence and one load.
    if w.word.sleepers().any() && w.word.searchers().idle() {
        notify_sleeper(w);
    }
}

/// The daemon's nudge of a queue whose jobs outlast two scans: wakes one sleeper as a push
/// would, without asking the count whether anyone sleeps (a process attached to the segment
/// may have zeroed it under sleeping waiters; an idle queue pays one `FUTEX_WAKE`).
#[cold]
pub fn nudge(w: Waker<'_>) {
    notify_sleeper(w);
}

/// The daemon's nudge of a queue whose jobs outlast two scans ([`nudge`]), which also zeroes
/// its count of searchers: a live searcher takes a job within microseconds, so a count
/// standing beside jobs for two scans is garbage (or a dead one's recovery could not take
/// off), and left standing it makes every later push skip its wake, for good. Zeroed
/// before the wake, so that the wake covers the jobs pushes skipped for it
/// (`Searchers::forget` says why a live searcher is safe from it).
#[cold]
pub fn nudge_stranded(w: Waker<'_>) {
    w.word.searchers().forget();
    notify_sleeper(w);
}

#[cold]
fn notify_sleeper(w: Waker<'_>) {
    // Read after the Dekker pair's fence: a resume clears the bit before it wakes every
    // sleeper, and a consumer that frees a slot gives it back before its own notify, so a
    // job this skips is seen by that wake (`segment::flow`, `segment::running`).
    if w.closed() {
        return;
    }
    let mut wake = match (w.dir.is_some()).then(|| w.word.sleepers().claim()).flatten() {
        Some(bit) => Wake::Descriptor(bit),
        None => Wake::Futex,
    };
    // A claimed waiter whose socket is gone took the count with it: try the next one.
    while let (Wake::Descriptor(bit), Some(dir)) = (wake, w.dir) {
        if dir.send(w.queue, bit) {
            return;
        }
        wake = w.word.sleepers().claim().map_or(Wake::Futex, Wake::Descriptor);
    }
    futex_wake_one(w.word);
}

#[cold]
fn futex_wake_one(w: &WaitWord) {
    w.seq.fetch_add(1, Ordering::Release);
    // One sleeper per notify: every notify stands for one job made available (a push, a
    // re-queue), and one consumer can take it. Waking them all made every sleeper run for
    // each job (a herd). No wake-up is lost by it: a sleeper still in the kernel's queue is
    // woken by the next job's notify, and one on its way there finds `seq` changed and looks
    // again. Errors (EFAULT cannot happen for a live reference) are ignored: a sleeper that
    // is not woken still returns at its timeout.
    let _ = rustix::thread::futex::wake(&w.seq, rustix::thread::futex::Flags::empty(), 1);
}

/// Wakes every sleeper, for a change all of them must see (the segment was retired, the
/// queue deleted).
#[cold]
pub fn wake_all(w: Waker<'_>) {
    if let Some(dir) = w.dir {
        while let Some(bit) = w.word.sleepers().claim() {
            dir.send(w.queue, bit);
        }
    }
    w.word.seq.fetch_add(1, Ordering::Release);
    let _ = rustix::thread::futex::wake(&w.word.seq, rustix::thread::futex::Flags::empty(), i32::MAX as u32);
}

/// How long a consumer keeps looking, yielding its CPU between looks, before it sleeps. A
/// sleeper costs every push a `FUTEX_WAKE`; a stream of jobs arriving every few µs would
/// otherwise put the consumers to sleep between jobs and make the producer pay a system call
/// for each. Short enough that an idle consumer is asleep within tens of µs.
const LOOK_BEFORE_SLEEP: std::time::Duration = std::time::Duration::from_micros(20);

/// How many consumers of a queue look for work at once, in all processes: half the CPUs,
/// at least one (as tokio keeps at most half its idle workers searching). More spent the
/// producer's core on handing the line of `top` around (each of them looks at each new
/// `bottom` and races for `top`); fewer would leave a burst of jobs to a chain of wakes.
pub fn search_bound() -> u32 {
    static BOUND: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *BOUND.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        u32::try_from(cpus / 2).unwrap_or(u32::MAX).max(1)
    })
}

/// The longest one futex sleep lasts before the sleeper looks again (an idle consumer pays
/// one wake-up per slice).
const SLICE: std::time::Duration = std::time::Duration::from_secs(1);

/// Calls `poll` until it yields something, sleeping on `waker`'s word between tries, until
/// `deadline` (`None`: forever). `Ok(None)` means the deadline passed. A queue out of rate
/// tokens is looked at again when the next one is due: no event announces it.
///
/// Between the first look and the sleep, a consumer keeps looking only as one of the queue's
/// searchers ([`search_bound`] at most); over the bound it sleeps at once. `jobs_left` says
/// whether the queue still holds work: a searcher that took a job asks it before it hands
/// the search on (`wake_protocol::Searchers`).
pub fn wait_for<T, E>(
    waker: Waker<'_>,
    deadline: Option<Instant>,
    mut poll: impl FnMut() -> Result<Option<T>, E>,
    jobs_left: impl Fn() -> bool,
) -> Result<Option<T>, E> {
    let w = waker.word;
    // A consumer back from a job looks once before it counts itself a searcher: under load
    // it takes the next job at once and never touches the count. One woken from its sleep
    // searches at once: it was woken for a job, and if it leaves others behind it wakes the
    // next sleeper.
    let mut woken = false;
    loop {
        if !woken {
            if let Some(v) = poll()? {
                return Ok(Some(v));
            }
        }
        if let Some(v) = search(waker, deadline, &mut poll, &jobs_left)? {
            return Ok(Some(v));
        }
        woken = true;
        let s = w.seq.load(Ordering::Acquire);
        let slept = waker.sleep_begins();
        let found = poll();
        let timed_out = if matches!(&found, Ok(None)) {
            match sleep(waker, s, deadline) {
                Some(timed_out) => timed_out,
                None => {
                    waker.sleep_ends(slept);
                    return Ok(None);
                }
            }
        } else {
            false
        };
        waker.sleep_ends(slept);
        match found {
            Ok(Some(v)) => return Ok(Some(v)),
            Err(e) => return Err(e),
            Ok(None) if timed_out => return poll(),
            Ok(None) => {}
        }
    }
}

/// Looks for work as one of the queue's searchers, yielding the CPU between looks, for
/// [`LOOK_BEFORE_SLEEP`] or until `deadline`; `Ok(None)` when it found nothing or the
/// searchers were at their bound (the caller sleeps).
fn search<T, E>(
    waker: Waker<'_>,
    deadline: Option<Instant>,
    poll: &mut impl FnMut() -> Result<Option<T>, E>,
    jobs_left: &impl Fn() -> bool,
) -> Result<Option<T>, E> {
    loop {
        if !waker.search_begins() {
            // Enough consumers look already; one look of our own, not counted, then sleep.
            return poll();
        }
        // The clock is read only once a look found nothing: a searcher that finds a job at
        // once pays no clock read for the search.
        let mut look_until = None;
        loop {
            match poll() {
                Ok(None) => {}
                found => {
                    // Taken (or an error, after which it looks no more): hand the search on.
                    if waker.search_ends(jobs_left) {
                        notify(waker);
                    }
                    return found;
                }
            }
            let now = Instant::now();
            let until = *look_until.get_or_insert(now + LOOK_BEFORE_SLEEP);
            if now >= until || deadline.is_some_and(|d| now >= d) {
                break;
            }
            std::thread::yield_now();
        }
        // Gave up. The last searcher looks whether pushes came that skipped their wakes for
        // it, and searches again if so (a searcher that is not the last leaves that to the
        // others); past its deadline it hands the search on instead, as it stops waiting.
        if !waker.search_ends(jobs_left) {
            return Ok(None);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            notify(waker);
            return Ok(None);
        }
    }
}

/// One futex sleep on `waker`'s word while `seq` still holds `s`: `Some(timed_out)` (whether
/// `deadline` passed meanwhile), or `None` when `deadline` had passed before it.
fn sleep(waker: Waker<'_>, s: u32, deadline: Option<Instant>) -> Option<bool> {
    // Never longer than one slice: a wake-up that can never come (the segment's file was
    // truncated, so no wake reaches this futex) must not leave the sleeper asleep for good;
    // the next look then sees the segment retired.
    let timeout = match deadline {
        None => SLICE,
        Some(d) => {
            let now = Instant::now();
            if now >= d {
                return None;
            }
            (d - now).min(SLICE)
        }
    };
    let timeout = match waker.rate_wait_ns() {
        0 => timeout,
        ns => timeout.min(std::time::Duration::from_nanos(ns)),
    };
    let timeout =
        rustix::time::Timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
    // EAGAIN (seq moved), EINTR and ETIMEDOUT all mean: look again.
    let _ = rustix::thread::futex::wait(
        &waker.word.seq,
        rustix::thread::futex::Flags::empty(),
        s,
        Some(&timeout),
    );
    Some(deadline.is_some_and(|d| Instant::now() >= d))
}

/// Wakes every futex sleeper on `word` (a batch's, say); the word is changed by the caller
/// first.
pub fn wake_all_word(word: &crate::sync::AtomicU32) {
    let _ = rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), i32::MAX as u32);
}

/// Sleeps on `word` while it holds `seen`, at most `timeout` (a wake, a change or the
/// timeout ends it; the caller looks again either way).
pub fn sleep_on_word(word: &crate::sync::AtomicU32, seen: u32, timeout: std::time::Duration) {
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    let _ = rustix::thread::futex::wait(word, rustix::thread::futex::Flags::empty(), seen, Some(&ts));
}
