//! `xtcq.Thief`: a consumer of one queue, stealing from its overflow ring and every deque.
//!
//! - A steal that may wait sleeps (a futex, woken by a push in any process) with the GIL
//!   released, in slices of at most `STEP`: between slices it takes the GIL back and runs
//!   the signal handlers, so Ctrl-C (KeyboardInterrupt) ends a steal that waits without a
//!   limit. A slice's claim is kept only if no handler raised: an interrupt that came
//!   during the slice gives the job back unrun (no attempt counted), rather than leaving a
//!   claimed job to be nacked when it is collected.
//! - `steal()` with no timeout is one pass over the queue and keeps the GIL (no sleep).
//! - Thread-safe: several threads may steal through one Thief; a blocking steal holds its
//!   own reference to the handle, no lock, while the GIL is released.
//! - asyncio: `steal_async()` returns the coroutine of `xtcq._asyncio`, which waits with
//!   `loop.add_reader` on the thief's wake descriptor (`_wake_fileno`, `_steal_or_arm`,
//!   `_wait_cancel` here): one descriptor per Thief, made on first use; a cancelled wait
//!   disarms it, handing on a wake it was sent.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyTuple};
use xtcq_client::{Error, OwnedJob, ThiefHandle, WakeFd};

use crate::args::{repr, Wait};
use crate::error::{invalid, OrRaise};
use crate::job::Job;
use crate::lock;
use crate::producer::MAX_BATCH;

/// The longest sleep between two looks at pending signals.
const STEP: Duration = Duration::from_millis(100);

/// A consumer of one queue. Thread-safe: several threads may steal through one Thief.
#[pyclass(frozen, module = "xtcq")]
pub struct Thief {
    inner: Mutex<Option<Arc<ThiefHandle>>>,
    /// Its wake descriptor, once an asyncio wait asked for it.
    wake: Mutex<Option<WakeFd>>,
    /// The queue's name.
    #[pyo3(get)]
    queue: String,
}

impl Thief {
    pub(crate) fn new(handle: ThiefHandle, queue: String) -> Self {
        Self { inner: Mutex::new(Some(Arc::new(handle))), wake: Mutex::new(None), queue }
    }

    fn live(&self, py: Python<'_>) -> PyResult<Arc<ThiefHandle>> {
        lock(&self.inner).clone().ok_or_else(|| invalid(py, "Thief is closed"))
    }

    /// Waits up to `limit` (`None`: no limit) in slices, checking signals between them.
    fn wait(py: Python<'_>, thief: &ThiefHandle, limit: Option<Duration>) -> PyResult<Option<OwnedJob>> {
        // A limit too long to add to the clock is as good as none.
        let deadline = limit.and_then(|t| Instant::now().checked_add(t));
        loop {
            let step = deadline.map_or(STEP, |d| d.saturating_duration_since(Instant::now()).min(STEP));
            let got = py.detach(|| thief.steal_wait(Some(step)).map(|j| j.map(|j| j.into_owned())));
            match got.or_raise(py)? {
                Some(job) => {
                    if let Err(interrupt) = py.check_signals() {
                        // Best effort: a job whose lease ran out meanwhile is not ours to give.
                        let _ = job.release();
                        return Err(interrupt);
                    }
                    return Ok(Some(job));
                }
                None => {
                    py.check_signals()?;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                }
            }
        }
    }
}

#[pymethods]
impl Thief {
    /// One job, or None. `timeout`: seconds to wait for one (None or inf: no limit, 0: none).
    #[pyo3(signature = (timeout=Wait::No), text_signature = "($self, timeout=0)")]
    fn steal(&self, py: Python<'_>, timeout: Wait) -> PyResult<Option<Job>> {
        let limit = match timeout {
            Wait::No => {
                let guard = lock(&self.inner);
                let thief = guard.as_ref().ok_or_else(|| invalid(py, "Thief is closed"))?;
                let job = thief.steal().or_raise(py)?;
                return Ok(job.map(|j| Job::new(j.into_owned())));
            }
            Wait::Forever => None,
            Wait::For(d) => Some(d),
        };
        let thief = self.live(py)?;
        Ok(Self::wait(py, &thief, limit)?.map(Job::new))
    }

    /// Up to `n` jobs (1 to 128) taken with one steal, each claimed by its own record's
    /// CAS: a list of Jobs, empty when there was none. Each is settled on its own.
    fn steal_batch(&self, py: Python<'_>, n: &Bound<'_, PyAny>) -> PyResult<Vec<Job>> {
        let bad = || invalid(py, format!("n is 1 to {MAX_BATCH}, not {}", repr(n)));
        if n.is_instance_of::<PyBool>() || !n.is_instance_of::<PyInt>() {
            return Err(bad());
        }
        let n = n.extract::<usize>().ok().filter(|n| (1..=MAX_BATCH).contains(n)).ok_or_else(bad)?;
        let guard = lock(&self.inner);
        let thief = guard.as_ref().ok_or_else(|| invalid(py, "Thief is closed"))?;
        let jobs = thief.steal_batch(n).or_raise(py)?;
        Ok(jobs.into_iter().map(|j| Job::new(j.into_owned())).collect())
    }

    /// The coroutine of one job, waiting in the running asyncio loop (`loop.add_reader` on
    /// the thief's wake descriptor) until one may be there. Cancelling it takes nothing.
    fn steal_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py().import("xtcq._asyncio")?.call_method1("steal_async", (slf,))
    }

    /// The coroutine of up to `n` jobs (1 to 128): waits as `steal_async` for the first,
    /// then takes what one steal finds besides.
    fn steal_batch_async<'py>(slf: &Bound<'py, Self>, n: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        slf.py().import("xtcq._asyncio")?.call_method1("steal_batch_async", (slf, n))
    }

    /// The wake descriptor's fd (made on first use): readable when a job may be there.
    fn _wake_fileno(&self, py: Python<'_>) -> PyResult<i32> {
        use std::os::fd::AsRawFd;
        let mut w = crate::lock_py(py, &self.wake);
        if w.is_none() {
            let thief = self.live(py)?;
            *w = Some(py.detach(|| thief.wake_fd()).or_raise(py)?);
        }
        Ok(w.as_ref().map_or(-1, |w| w.as_raw_fd()))
    }

    /// One job, or None after arming the wake descriptor (never waits).
    fn _steal_or_arm(&self, py: Python<'_>) -> PyResult<Option<Job>> {
        let thief = self.live(py)?;
        let mut w = crate::lock_py(py, &self.wake);
        let Some(wake) = w.as_ref() else { return Err(invalid(py, "no wake descriptor yet")) };
        let got = thief.steal_or_arm(wake).map(|job| job.map(|j| Job::new(j.into_owned())));
        match got {
            Ok(job) => Ok(job),
            Err(e) => {
                // The daemon went away: the next wait makes a new descriptor.
                if matches!(e, Error::DaemonLost { .. }) {
                    *w = None;
                }
                Err(e).or_raise(py)
            }
        }
    }

    /// Stops waiting without a job: a wake sent meanwhile goes to another waiter.
    fn _wait_cancel(&self, py: Python<'_>) {
        if let Some(w) = crate::lock_py(py, &self.wake).as_ref() {
            w.disarm_and_hand_on();
        }
    }

    /// Closes the handle now (also done when the object is collected).
    fn close(&self, py: Python<'_>) {
        let wake = crate::lock_py(py, &self.wake).take();
        let taken = lock(&self.inner).take();
        py.detach(|| {
            drop(wake);
            drop(taken)
        });
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) {
        self.close(py);
    }
}
