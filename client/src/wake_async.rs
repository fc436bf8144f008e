//! `steal_async`: a thief's steal that waits in tokio, over the wake descriptor ([`WakeFd`]),
//! behind the `tokio` feature.
//!
//! Rules kept:
//! - dropping the future at any await point (`select!`, a timeout) neither loses a job nor
//!   leaves one claimed: a job is only ever taken synchronously and returned at once, and a
//!   waiter dropped while armed disarms, handing on a wake it was sent;
//! - the daemon going away ends the wait with [`Error::DaemonLost`] (the descriptor is
//!   readable then): make a new [`AsyncWake`] once the thief reconnects.

use tokio::io::unix::AsyncFd;

use crate::handles::ThiefHandle;
use crate::job::Job;
use crate::wake::WakeFd;
use crate::Error;

/// A wake descriptor registered with the current tokio runtime's reactor.
#[derive(Debug)]
pub struct AsyncWake {
    fd: AsyncFd<WakeFd>,
}

impl AsyncWake {
    /// Registers `wake` with the current runtime (call from within one).
    pub fn new(wake: WakeFd) -> Result<AsyncWake, Error> {
        // `new` is deprecated for types that could close or swap their fd while registered;
        // a WakeFd owns its epoll fd, closes it only when dropped (after this AsyncFd, its
        // owner, deregistered it), and `as_raw_fd` always returns that same fd. (This crate
        // forbids `unsafe`, which `register` would need for the same promise.)
        #[allow(deprecated)]
        let fd = AsyncFd::with_interest(wake, tokio::io::Interest::READABLE);
        Ok(AsyncWake { fd: fd.map_err(Error::Wake)? })
    }

    /// The descriptor.
    pub fn get_ref(&self) -> &WakeFd {
        self.fd.get_ref()
    }
}

/// Disarms on drop: the future was dropped while waiting.
struct Armed<'a>(&'a WakeFd);

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.0.disarm_and_hand_on();
    }
}

impl ThiefHandle {
    /// Steals a job, waiting (in tokio, without a thread) until one may be there. Cancel
    /// safe: see the module docs.
    pub async fn steal_async<'a>(&'a self, wake: &AsyncWake) -> Result<Job<'a>, Error> {
        let armed = Armed(wake.get_ref());
        loop {
            if let Some(j) = self.steal_or_arm(armed.0)? {
                // steal_or_arm disarmed; the guard's disarm is then a no-op.
                return Ok(j);
            }
            let mut ready = wake.fd.readable().await.map_err(Error::Wake)?;
            // steal_or_arm reads the wakes before it arms again.
            ready.clear_ready();
        }
    }

    /// Up to `limit` jobs (at most 128) once one may be there: waits as
    /// [`steal_async`](Self::steal_async) does for the first, then takes what else is there at
    /// once, as [`steal_batch`](Self::steal_batch) does. Cancel safe in the same way: every
    /// job is taken after the last await point. `limit` 0 is taken as 1.
    pub async fn steal_batch_async<'a>(
        &'a self,
        wake: &AsyncWake,
        limit: usize,
    ) -> Result<Vec<Job<'a>>, Error> {
        let first = self.steal_async(wake).await?;
        let mut jobs = vec![first];
        if limit > 1 {
            // The first job is in hand: an error taking more is left for the next call to
            // meet, rather than dropping (and so giving back) the job taken.
            if let Ok(more) = self.steal_batch(limit - 1) {
                jobs.extend(more);
            }
        }
        Ok(jobs)
    }
}
