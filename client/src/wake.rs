//! Waiting for a queue's work from an event loop: a descriptor that becomes readable when a
//! job may be there to steal (`epoll`, `poll`, libuv, tokio's `AsyncFd`, asyncio's
//! `add_reader`, PostgreSQL's `WaitEventSet`).
//!
//! The loop: [`ThiefHandle::steal_or_arm`] takes a job, or consumes the readiness and arms
//! the descriptor; when the descriptor is readable, the loop calls it again. Woken, the first
//! thing it does is the steal: the readiness is consumed only when it is about to wait again.
//!
//! Rules kept:
//! - the descriptor is an epoll instance over two things: the socket the daemon bound for
//!   this waiter (`xtcq_shm::wake_protocol`: a push sends it a datagram when it is armed) and
//!   a copy of the control connection, so that the daemon going away (a stop, a crash, a
//!   restart) makes it readable too, and [`WakeFd::clear`] then says so
//!   ([`Error::DaemonLost`]): ask the thief for a new one;
//! - spurious readiness is allowed, missed readiness never: arming is the protocol's Dekker
//!   pair, and a waiter that stops waiting after it was sent a wake hands the wake on;
//! - a queue out of rate tokens has no event to announce the next one: a timer in the same
//!   epoll set makes the descriptor readable when it is due;
//! - no thread, no signal handler; every fd is close-on-exec and non-blocking;
//! - in a child forked after it was made, every call fails with [`Error::Forked`] and the
//!   drop gives nothing back (the parent's waiter lives on).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustix::event::epoll;
use xtcq_proto::{Request, Response};
use xtcq_shm::wake_protocol::Disarmed;
use xtcq_shm::Segment;

use crate::conn::Conn;
use crate::handles::ThiefHandle;
use crate::job::Job;
use crate::Error;

/// A queue's wake descriptor for one waiter. Readable when a job may be there to steal, or
/// when the daemon went away. `Send + Sync`; one waiter at a time should use it.
pub struct WakeFd {
    epoll: OwnedFd,
    socket: OwnedFd,
    /// Readable when the queue's next rate token is due (armed only while out of tokens).
    timer: OwnedFd,
    control: std::os::unix::net::UnixStream,
    bit: u32,
    queue: u32,
    queue_name: String,
    armed: AtomicBool,
    seg: Arc<Segment>,
    conn: Arc<Conn>,
}

impl std::fmt::Debug for WakeFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeFd").field("queue", &self.queue_name).field("bit", &self.bit).finish()
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

impl WakeFd {
    /// Asks the daemon for a wake descriptor of `thief`'s queue.
    pub(crate) fn new(thief: &ThiefHandle) -> Result<WakeFd, Error> {
        let queue_name = thief.att.queue.name.clone();
        let req = Request::WakeDescriptor { queue: queue_name.clone() };
        let (bit, socket) = match thief.conn.request_with_fd(req, Some(&queue_name), thief.conn.timeout)? {
            (Response::WakeDescriptor { bit }, Some(fd)) => (bit, fd),
            (r, _) => {
                return Err(Error::Protocol {
                    path: thief.conn.path().to_path_buf(),
                    message: format!(
                        "the daemon answered a wake descriptor request with {r:?} and no socket"
                    ),
                })
            }
        };
        let control = thief.conn.link_stream().map_err(io)?;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(io)?;
        epoll::add(&ep, &socket, epoll::EventData::new_u64(0), epoll::EventFlags::IN).map_err(io)?;
        // Only the hang-up (always reported): replies on it are read by requests.
        epoll::add(&ep, &control, epoll::EventData::new_u64(1), epoll::EventFlags::RDHUP).map_err(io)?;
        use rustix::time::{timerfd_create, TimerfdClockId, TimerfdFlags};
        let timer = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK)
            .map_err(io)?;
        epoll::add(&ep, &timer, epoll::EventData::new_u64(2), epoll::EventFlags::IN).map_err(io)?;
        Ok(WakeFd {
            epoll: ep,
            socket,
            timer,
            control,
            bit,
            queue: thief.att.queue.index,
            queue_name,
            armed: AtomicBool::new(false),
            seg: thief.seg.clone(),
            conn: thief.conn.clone(),
        })
    }

    /// Consumes the readiness: reads the wakes that arrived ([`ThiefHandle::steal_or_arm`]
    /// does it before it arms). Fails with [`Error::DaemonLost`] once the daemon went away
    /// (the descriptor stays readable): get a new one from the thief, which reconnects.
    pub fn clear(&self) -> Result<(), Error> {
        self.conn.not_forked()?;
        let mut buf = [0u8; 16];
        use rustix::net::RecvFlags;
        while let Ok((n, _)) = rustix::net::recv(&self.socket, &mut buf, RecvFlags::DONTWAIT) {
            if n == 0 {
                break;
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

    /// Arms this waiter (once; the caller then looks for work once more).
    fn arm(&self) {
        if !self.armed.swap(true, Ordering::AcqRel) {
            if let Some(w) = self.seg.wait_word(self.queue) {
                w.sleepers().arm(self.bit);
            }
        }
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
        if !self.armed.swap(false, Ordering::AcqRel) {
            return Disarmed::Quiet;
        }
        match self.seg.wait_word(self.queue) {
            Some(w) => w.sleepers().disarm(self.bit),
            None => Disarmed::Quiet,
        }
    }

    /// Stops waiting without taking a job: a wake sent meanwhile goes to another waiter.
    pub fn disarm_and_hand_on(&self) {
        if self.disarm() == Disarmed::Woken {
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
        if self.conn.is_connected() {
            let req = Request::ReleaseWake { queue: self.queue_name.clone(), bit: self.bit };
            let _ = self.conn.request(req, Some(&self.queue_name));
        }
    }
}

impl ThiefHandle {
    /// A descriptor that becomes readable when a job may be there to steal from this queue
    /// (or when the daemon went away): see [`WakeFd`]. One per waiter; each costs the daemon
    /// a socket, and a queue has room for 256 at once.
    pub fn wake_fd(&self) -> Result<WakeFd, Error> {
        WakeFd::new(self)
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
        // Looking now: a wake sent meanwhile is the one this look answers.
        wake.disarm();
        if let Some(j) = self.steal()? {
            return Ok(Some(j));
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
