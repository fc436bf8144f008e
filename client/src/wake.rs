//! Waiting for a queue's work from an event loop: a descriptor that becomes readable when a
//! job may be there to steal (`epoll`, `poll`, libuv, tokio's `AsyncFd`, asyncio's
//! `add_reader`, PostgreSQL's `WaitEventSet`).
//!
//! The loop: [`ThiefHandle::steal_or_arm`] takes a job, or consumes the readiness and arms
//! the descriptor; when the descriptor is readable, the loop calls it again. Woken, the first
//! thing it does is the steal: the readiness is consumed only when it is about to wait again.
//!
//! Two kinds, one protocol (`xtcq_shm::wake_protocol`):
//! - [`WakeKind::Futex`], where the kernel has io_uring futex waits (Linux 6.7+, io_uring not
//!   disabled): an io_uring holding a futex wait on the queue's wait word. A push wakes it
//!   with the one `FUTEX_WAKE` it makes for any sleeper: the kernel's wake-one, a consumer's
//!   latency the futex's, and no socket or name at all;
//! - [`WakeKind::Datagram`], elsewhere: the socket the daemon bound for this waiter in its
//!   wake directory, sent a datagram by a push while armed.
//!
//! `XTCQ_WAKE_FD=datagram` (or `futex`) in the environment picks a kind for
//! [`ThiefHandle::wake_fd`]; unset or `auto`, the futex kind where it works.
//!
//! Rules kept:
//! - the descriptor is an epoll instance over the waiter (the ring or the socket), a copy of
//!   the control connection, so that the daemon going away (a stop, a crash, a restart) makes
//!   it readable too, and [`WakeFd::clear`] then says so ([`Error::DaemonLost`]): ask the
//!   thief for a new one;
//! - spurious readiness is allowed, missed readiness never: arming is the protocol's Dekker
//!   pair, a disarm leaves no futex wait behind (`xtcq_shm::futex_ring`), and a waiter that
//!   stops waiting after it was sent a wake hands the wake on;
//! - a queue out of rate tokens has no event to announce the next one: a timer in the same
//!   epoll set makes the descriptor readable when it is due;
//! - no thread, no signal handler; every fd is close-on-exec and non-blocking. A thread asleep
//!   in `epoll_wait` on a futex-kind descriptor it armed may see `EINTR` once per wake (the
//!   ring's completion is posted by the arming thread): retry, as event loops do;
//! - in a child forked after it was made, every call fails with [`Error::Forked`] and the
//!   drop gives nothing back (the parent's waiter lives on).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::event::epoll;
use xtcq_proto::{Request, Response};
use xtcq_shm::futex_ring::{FutexRing, WaitEnd};
use xtcq_shm::wait::Sleep;
use xtcq_shm::wake_protocol::Disarmed;
use xtcq_shm::Segment;

use crate::conn::Conn;
use crate::handles::ThiefHandle;
use crate::job::Job;
use crate::Error;

/// What wakes a [`WakeFd`] (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeKind {
    /// An io_uring futex wait on the queue's wait word: woken by a push's `FUTEX_WAKE`.
    Futex,
    /// A datagram socket the daemon bound for this waiter: woken by a push's datagram.
    Datagram,
}

/// The environment variable that picks a [`WakeKind`] for [`ThiefHandle::wake_fd`]:
/// `futex`, `datagram` or `auto`.
pub const WAKE_FD_ENV: &str = "XTCQ_WAKE_FD";

/// The waiter inside the epoll set.
enum Waiter {
    Futex {
        ring: Mutex<FutexRing>,
        /// The wait word's value read before this waiter was counted (the Dekker pair's
        /// first half): the ring's wait sleeps only while the word still holds it.
        seen: AtomicU32,
        /// The sleep the arm began (`xtcq_shm::wait::Sleep`, as a word), for the disarm to
        /// end: it ends off the count only if the daemon did not take it off already.
        sleep: AtomicU64,
    },
    Datagram {
        socket: OwnedFd,
        bit: u32,
    },
}

/// A queue's wake descriptor for one waiter. Readable when a job may be there to steal, or
/// when the daemon went away. `Send + Sync`; one waiter at a time should use it.
pub struct WakeFd {
    epoll: OwnedFd,
    waiter: Waiter,
    /// Readable when the queue's next rate token is due (armed only while out of tokens).
    timer: OwnedFd,
    control: UnixStream,
    queue: u32,
    queue_name: String,
    /// The thief's process slot, whose block records this waiter's futex sleeps.
    slot: u32,
    armed: AtomicBool,
    seg: Arc<Segment>,
    conn: Arc<Conn>,
}

impl std::fmt::Debug for WakeFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeFd").field("queue", &self.queue_name).field("kind", &self.kind()).finish()
    }
}

impl AsFd for WakeFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

impl AsRawFd for WakeFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.epoll.as_raw_fd()
    }
}

fn io(e: impl Into<std::io::Error>) -> Error {
    Error::Wake(e.into())
}

/// The futex kind refused by the kernel: says so, and how to pick the other kind.
fn futex_refused(e: std::io::Error) -> Error {
    let hint = format!("{e}; the datagram kind needs no io_uring ({WAKE_FD_ENV}=datagram, or auto)");
    Error::Wake(std::io::Error::new(e.kind(), hint))
}

impl WakeFd {
    /// A wake descriptor of `thief`'s queue, of `kind`.
    pub(crate) fn new(thief: &ThiefHandle, kind: WakeKind) -> Result<WakeFd, Error> {
        let waiter = match kind {
            WakeKind::Futex => Waiter::Futex {
                ring: Mutex::new(FutexRing::new().map_err(futex_refused)?),
                seen: AtomicU32::new(0),
                sleep: AtomicU64::new(u64::MAX),
            },
            WakeKind::Datagram => Self::datagram(thief)?,
        };
        let (epoll, timer, control) = match Self::around(thief, &waiter) {
            Ok(fds) => fds,
            Err(e) => {
                // Short of fds (`ulimit -n`): a datagram waiter the daemon granted is given
                // back, or each failed try would hold one of the queue's 256 until exit.
                if let Waiter::Datagram { bit, .. } = waiter {
                    Self::give_back(thief, bit);
                }
                return Err(e);
            }
        };
        Ok(WakeFd {
            epoll,
            waiter,
            timer,
            control,
            queue: thief.att.queue.index,
            queue_name: thief.att.queue.name.clone(),
            slot: thief.att.process_slot,
            armed: AtomicBool::new(false),
            seg: thief.seg.clone(),
            conn: thief.conn.clone(),
        })
    }

    /// The epoll set around `waiter`, with the rate timer and a copy of the control
    /// connection in it: `(epoll, timer, control)`.
    fn around(thief: &ThiefHandle, waiter: &Waiter) -> Result<(OwnedFd, OwnedFd, UnixStream), Error> {
        let control = thief.conn.link_stream()?;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(io)?;
        let inner = match waiter {
            Waiter::Futex { ring, .. } => {
                let ring = ring.lock().unwrap_or_else(|p| p.into_inner());
                epoll::add(&ep, &*ring, epoll::EventData::new_u64(0), epoll::EventFlags::IN)
            }
            Waiter::Datagram { socket, .. } => {
                epoll::add(&ep, socket, epoll::EventData::new_u64(0), epoll::EventFlags::IN)
            }
        };
        inner.map_err(io)?;
        // Only the hang-up (always reported): replies on it are read by requests.
        epoll::add(&ep, &control, epoll::EventData::new_u64(1), epoll::EventFlags::RDHUP).map_err(io)?;
        use rustix::time::{timerfd_create, TimerfdClockId, TimerfdFlags};
        let timer = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK)
            .map_err(io)?;
        epoll::add(&ep, &timer, epoll::EventData::new_u64(2), epoll::EventFlags::IN).map_err(io)?;
        Ok((ep, timer, control))
    }

    /// Asks the daemon for a datagram waiter of `thief`'s queue: its socket and bit.
    fn datagram(thief: &ThiefHandle) -> Result<Waiter, Error> {
        let queue = thief.att.queue.name.clone();
        let req = Request::WakeDescriptor { queue: queue.clone() };
        let message = match thief.conn.request_with_fd(req, Some(&queue), thief.conn.timeout)? {
            (Response::WakeDescriptor { bit }, Some(socket)) => return Ok(Waiter::Datagram { socket, bit }),
            // The kernel drops a passed fd that does not fit under `ulimit -n`.
            (Response::WakeDescriptor { bit }, None) => {
                Self::give_back(thief, bit);
                return Err(io(std::io::Error::other(
                    "the daemon's socket did not arrive: out of file descriptors (ulimit -n)?",
                )));
            }
            (r, _) => format!("the daemon answered a wake descriptor request with {r:?} and no socket"),
        };
        Err(Error::Protocol { path: thief.conn.path().to_path_buf(), message })
    }

    /// Gives datagram waiter `bit` of `thief`'s queue back to the daemon (best effort: the
    /// daemon also takes it back when this process's slot is recovered).
    fn give_back(thief: &ThiefHandle, bit: u32) {
        let queue = thief.att.queue.name.clone();
        let _ = thief.conn.request(Request::ReleaseWake { queue: queue.clone(), bit }, Some(&queue));
    }

    /// What wakes this descriptor.
    pub fn kind(&self) -> WakeKind {
        match self.waiter {
            Waiter::Futex { .. } => WakeKind::Futex,
            Waiter::Datagram { .. } => WakeKind::Datagram,
        }
    }

    /// Consumes the readiness: reads the wakes that arrived ([`ThiefHandle::steal_or_arm`]
    /// does it before it arms). Fails with [`Error::DaemonLost`] once the daemon went away
    /// (the descriptor stays readable): get a new one from the thief, which reconnects.
    pub fn clear(&self) -> Result<(), Error> {
        self.conn.not_forked()?;
        match &self.waiter {
            Waiter::Futex { ring, .. } => ring.lock().unwrap_or_else(|p| p.into_inner()).drain(),
            Waiter::Datagram { socket, .. } => {
                let mut buf = [0u8; 16];
                use rustix::net::RecvFlags;
                while let Ok((n, _)) = rustix::net::recv(socket, &mut buf, RecvFlags::DONTWAIT) {
                    if n == 0 {
                        break;
                    }
                }
            }
        }
        // The count of expiries (EAGAIN when none): read to consume the readiness.
        let _ = rustix::io::read(&self.timer, &mut [0u8; 8]);
        let mut fds = [rustix::event::PollFd::new(&self.control, rustix::event::PollFlags::RDHUP)];
        let hung_up = rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 }))
            .is_ok_and(|n| n > 0)
            && fds[0].revents().intersects(
                rustix::event::PollFlags::HUP
                    | rustix::event::PollFlags::RDHUP
                    | rustix::event::PollFlags::ERR,
            );
        if hung_up {
            return Err(Error::DaemonLost {
                path: self.conn.path().to_path_buf(),
                reason: self.conn.shutdown_reason(),
            });
        }
        Ok(())
    }

    /// Arms this waiter (once; the caller then looks for work once more, and then sleeps).
    fn arm(&self) {
        if self.armed.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(w) = self.seg.waker(self.queue) else { return };
        match &self.waiter {
            Waiter::Futex { seen, sleep, .. } => {
                // Read before the count, as a futex sleeper does (see `xtcq_shm::wait`).
                seen.store(w.word.seq.load(Ordering::Acquire), Ordering::Relaxed);
                sleep.store(w.of_slot(&self.seg, self.slot).sleep_begins().to_word(), Ordering::Relaxed);
            }
            Waiter::Datagram { bit, .. } => w.word.sleepers().arm(*bit),
        }
    }

    /// Sleeps, once armed and the last look found nothing: the futex kind starts its wait
    /// (readable at once if a push came since the arm); the datagram kind is asleep already.
    fn sleep(&self) -> Result<(), Error> {
        let (Waiter::Futex { ring, seen, .. }, Some(w)) = (&self.waiter, self.seg.wait_word(self.queue))
        else {
            return Ok(());
        };
        let mut ring = ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.wait(&w.seq, seen.load(Ordering::Relaxed)).map_err(Error::Wake)
    }

    /// Makes the descriptor readable in `ns` (the queue's next rate token); 0: leaves the
    /// timer as it is (a readiness it brings later is spurious, which is allowed).
    fn wake_in(&self, ns: u64) {
        if ns == 0 {
            return;
        }
        use rustix::time::{timerfd_settime, Itimerspec, TimerfdTimerFlags, Timespec};
        let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
        let due = Timespec { tv_sec: (ns / 1_000_000_000) as _, tv_nsec: (ns % 1_000_000_000) as _ };
        // A failure leaves the daemon's nudge to wake the waiter a scan later.
        let _ = timerfd_settime(
            &self.timer,
            TimerfdTimerFlags::empty(),
            &Itimerspec { it_interval: zero, it_value: due },
        );
    }

    /// Disarms this waiter, if armed; whether a wake was sent to it meanwhile.
    fn disarm(&self) -> Disarmed {
        // In a forked child the armed flag, the ring and the count are the parent's: a
        // disarm here would cancel the parent's wait and take it off the count (its next
        // wake lost). Every path that disarms (a steal, a cancel, a dropped future) comes
        // through here.
        if self.conn.not_forked().is_err() || !self.armed.swap(false, Ordering::AcqRel) {
            return Disarmed::Quiet;
        }
        let Some(w) = self.seg.waker(self.queue) else { return Disarmed::Quiet };
        match &self.waiter {
            Waiter::Futex { ring, sleep, .. } => {
                // A cancel that failed leaves it unknown whether a wake was taken: hand one
                // on (spurious at worst).
                let end = ring.lock().unwrap_or_else(|p| p.into_inner()).disarm().unwrap_or(WaitEnd::Woken);
                let slept = Sleep::from_word(sleep.load(Ordering::Relaxed));
                w.of_slot(&self.seg, self.slot).sleep_ends(slept);
                match end {
                    WaitEnd::Woken => Disarmed::Woken,
                    WaitEnd::Quiet => Disarmed::Quiet,
                }
            }
            Waiter::Datagram { bit, .. } => w.word.sleepers().disarm(*bit),
        }
    }

    /// Stops waiting without taking a job: a wake sent meanwhile goes to another waiter.
    pub fn disarm_and_hand_on(&self) {
        self.hand_on(self.disarm());
    }

    /// Passes a wake this waiter was sent on to another waiter (it will not take the job).
    fn hand_on(&self, disarmed: Disarmed) {
        if disarmed == Disarmed::Woken {
            if let Some(w) = self.seg.waker(self.queue) {
                xtcq_shm::wait::notify(w);
            }
        }
    }
}

impl Drop for WakeFd {
    fn drop(&mut self) {
        if self.conn.not_forked().is_err() {
            return;
        }
        self.disarm_and_hand_on();
        // Best effort, over a live connection only: the daemon also takes it back when the
        // process's slot is recovered.
        if let (Waiter::Datagram { bit, .. }, true) = (&self.waiter, self.conn.is_connected()) {
            let req = Request::ReleaseWake { queue: self.queue_name.clone(), bit: *bit };
            let _ = self.conn.request(req, Some(&self.queue_name));
        }
    }
}

impl ThiefHandle {
    /// A descriptor that becomes readable when a job may be there to steal from this queue
    /// (or when the daemon went away): see [`WakeFd`]. One per waiter. Of the kind
    /// `XTCQ_WAKE_FD` names, else [`WakeKind::Futex`] where the kernel allows it, else
    /// [`WakeKind::Datagram`] (each of those costs the daemon a socket, and a queue has room
    /// for 256 at once).
    pub fn wake_fd(&self) -> Result<WakeFd, Error> {
        match std::env::var(WAKE_FD_ENV).as_deref() {
            Ok("datagram") => self.wake_fd_of(WakeKind::Datagram),
            Ok("futex") => self.wake_fd_of(WakeKind::Futex),
            Ok("auto") | Ok("") | Err(_) => {
                self.wake_fd_of(WakeKind::Futex).or_else(|_| self.wake_fd_of(WakeKind::Datagram))
            }
            Ok(other) => Err(Error::Wake(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{WAKE_FD_ENV}={other:?}: set it to futex, datagram or auto (or unset it)"),
            ))),
        }
    }

    /// A wake descriptor of exactly `kind`; fails where the kernel does not allow it.
    pub fn wake_fd_of(&self, kind: WakeKind) -> Result<WakeFd, Error> {
        WakeFd::new(self, kind)
    }

    /// Steals a job, or, when there is none, consumes `wake`'s readiness and arms it (a
    /// descriptor of this queue) so that it becomes readable when one may be there: `Ok(None)`
    /// means "poll `wake` until it is readable, then call again". Never blocks. Fails with
    /// [`Error::DaemonLost`] once the daemon went away (get a new descriptor).
    pub fn steal_or_arm(&self, wake: &WakeFd) -> Result<Option<Job<'_>>, Error> {
        if wake.queue != self.att.queue.index || !Arc::ptr_eq(&wake.seg, &self.seg) {
            return Err(Error::Protocol {
                path: self.conn.path().to_path_buf(),
                message: format!(
                    "a wake descriptor of queue {} used with a thief of {}",
                    wake.queue_name, self.att.queue.name
                ),
            });
        }
        // Looking now: a wake sent meanwhile is the one this look answers, unless the look
        // fails: then it goes to another waiter.
        let disarmed = wake.disarm();
        match self.steal() {
            Ok(Some(j)) => return Ok(Some(j)),
            Ok(None) => {}
            Err(e) => {
                wake.hand_on(disarmed);
                return Err(e);
            }
        }
        // Only now, about to wait: a wake that came is answered by the look just made. (One
        // still in flight was claimed before the disarm: a spurious readiness, no more.)
        wake.clear()?;
        wake.arm();
        match self.steal() {
            Ok(Some(j)) => {
                wake.disarm();
                Ok(Some(j))
            }
            Ok(None) => {
                if let Err(e) = wake.sleep() {
                    wake.disarm_and_hand_on();
                    return Err(e);
                }
                wake.wake_in(self.seg.waker(self.att.queue.index).map_or(0, |w| w.rate_wait_ns()));
                Ok(None)
            }
            Err(e) => {
                wake.disarm_and_hand_on();
                Err(e)
            }
        }
    }
}
