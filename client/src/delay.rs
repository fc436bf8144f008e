//! Delayed jobs and retries after a delay: [`InjectorHandle::push_delayed`],
//! [`JobOf::fail_after`](crate::JobOf::fail_after) / [`nack_after`](crate::JobOf::nack_after),
//! and the [`Due`] time they take.
//!
//! Rules kept:
//! - the job is written to the segment first (`Delayed`, in no index), then the daemon is
//!   told (`Schedule`) so that it puts the job in line once due and wakes the sleepers;
//! - the message is a hint: if it is lost (the daemon is restarting, or this process dies
//!   before it is sent) the daemon finds the job by its record scan, when it adopts the
//!   segment or recovers an exited process; so a failed `Schedule` does not fail the push
//!   (which would make a caller push the job twice);
//! - due times are CLOCK_MONOTONIC in the segment (the clock every process shares, which no
//!   one can set); a wall-clock time ([`Due::At`]) is turned into one when the job is
//!   written, so a later change of the system clock does not move it.

use std::time::{Duration, SystemTime};

use xtcq_proto::{Request, Response};
use xtcq_shm::segment::monotonic_ns;
use xtcq_shm::JobHandle;

use crate::conn::Conn;
use crate::handles::{usable, InjectorHandle};
use crate::Error;

/// When a delayed job is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// This long from now.
    In(Duration),
    /// At this wall-clock time (a time past is due at once).
    At(SystemTime),
}

impl Due {
    /// The due time as CLOCK_MONOTONIC ns, read now.
    pub fn monotonic_ns(self) -> u64 {
        let now = monotonic_ns();
        let ahead = match self {
            Due::In(d) => d,
            Due::At(t) => t.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO),
        };
        now.saturating_add(ahead.as_nanos().min(u64::MAX as u128) as u64)
    }
}

/// Tells the daemon of a job left `Delayed` (see the module's rules: a failure is not one).
pub(crate) fn announce(conn: &Conn, h: JobHandle) {
    match conn.request(Request::Schedule { index: h.index, generation: h.generation }, None) {
        Ok(Response::Scheduled) | Ok(_) | Err(_) => {}
    }
}

impl InjectorHandle {
    /// Queues a job that no consumer sees before `due`: written to the segment now, put in
    /// line by the daemon once due (and sleeping consumers woken then).
    pub fn push_delayed(&self, payload: &[u8], due: Due) -> Result<JobHandle, Error> {
        self.push_delayed_priority(payload, due, 0)
    }

    /// [`push_delayed`](Self::push_delayed) at `priority`: the level the job joins once due.
    pub fn push_delayed_priority(&self, payload: &[u8], due: Due, priority: u32) -> Result<JobHandle, Error> {
        usable(self.inj.segment(), &self.conn, &self.att, self.lost_at)?;
        let due = due.monotonic_ns();
        let h = self.inj.push_delayed_priority(payload, due, priority).map_err(Error::from_push)?;
        announce(&self.conn, h);
        Ok(h)
    }
}
