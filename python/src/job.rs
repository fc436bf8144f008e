//! `xtcq.Job`: a claimed job. Read `payload`, then settle it once: `ack()`, `nack()`,
//! `fail(reason)`, `fail_after(seconds)` or `release()`.
//!
//! - Collected (or closed) without being settled, the job is nacked: re-queued with one
//!   attempt more, as a worker that died holding it would have it.
//! - Used as a context manager it is acked when the block ends normally and failed (with the
//!   exception as its reason) when the block raises.
//! - In a forked child an inherited job raises `Forked` and its collection settles nothing
//!   (the claim is the parent's): `xtcq-client` holds it that way.

use std::cell::RefCell;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};
use xtcq_client::{Error, OwnedJob};

use crate::args::{delay, lease};
use crate::error::{invalid, OrRaise};
use crate::lock;

thread_local! {
    // One buffer per thread for payload reads: a steady stream of jobs allocates only the
    // bytes object it hands to Python.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A claimed job: read `payload`, then ack(), nack(), fail(reason) or release().
/// Collected without either, it is nacked. One thread at a time.
#[pyclass(frozen, module = "xtcq")]
pub struct Job {
    held: Mutex<Option<OwnedJob>>,
}

impl Job {
    pub(crate) fn new(job: OwnedJob) -> Self {
        Self { held: Mutex::new(Some(job)) }
    }

    fn settled(py: Python<'_>) -> PyErr {
        invalid(py, "the job was already settled (acked, nacked, failed or released) or closed")
    }

    /// `f` of the held job.
    fn with<T>(&self, py: Python<'_>, f: impl FnOnce(&mut OwnedJob) -> Result<T, Error>) -> PyResult<T> {
        let mut guard = lock(&self.held);
        let job = guard.as_mut().ok_or_else(|| Self::settled(py))?;
        f(job).or_raise(py)
    }

    /// Takes the job out to settle it with `how`.
    fn settle(&self, py: Python<'_>, how: impl FnOnce(OwnedJob) -> Result<(), Error>) -> PyResult<()> {
        let job = lock(&self.held).take().ok_or_else(|| Self::settled(py))?;
        how(job).or_raise(py)
    }

    /// What `fail` keeps: the reason's text, any NUL a space (a C reader would stop there).
    fn reason(reason: &Bound<'_, PyAny>) -> PyResult<String> {
        Ok(reason.str()?.to_string_lossy().replace('\0', " "))
    }
}

#[pymethods]
impl Job {
    /// The job's bytes.
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        SCRATCH.with_borrow_mut(|buf| {
            buf.clear();
            self.with(py, |j| j.read_payload(buf))?;
            Ok(PyBytes::new(py, buf))
        })
    }

    /// (record index, generation, attempts before this claim, lease deadline ns or 0).
    #[getter]
    fn info(&self, py: Python<'_>) -> PyResult<(u32, u32, u32, u64)> {
        self.with(py, |j| {
            let h = j.handle();
            Ok((h.index, h.generation, j.attempts(), j.lease_deadline_ns().unwrap_or(0)))
        })
    }

    /// The job's stable id, "index.birth", the same across its attempts (as xtcq work,
    /// xtcq dead and the daemon's logs print it).
    #[getter]
    fn id(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |j| Ok(j.id().to_string()))
    }

    /// Times the job was given back before this claim.
    #[getter]
    fn attempts(&self, py: Python<'_>) -> PyResult<u32> {
        self.with(py, |j| Ok(j.attempts()))
    }

    /// Whether the job was cancelled (xtcq cancel) while this process held it: its ack then
    /// raises JobCancelled. False while it is still ours, once settled, and once its record
    /// holds another job. A long job may look now and then, and stop.
    fn cancelled(&self) -> bool {
        lock(&self.held).as_ref().is_some_and(|j| j.cancelled())
    }

    /// Done. Raises NotHeld when the lease expired first (the result is not recorded), and
    /// JobCancelled when the job was cancelled meanwhile.
    fn ack(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py, OwnedJob::ack)
    }

    /// Failed: re-queued with attempt + 1, or dead-lettered at the queue's limit.
    fn nack(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py, OwnedJob::nack)
    }

    /// Like nack(), keeping `reason` as the job's last error.
    fn fail(&self, py: Python<'_>, reason: &Bound<'_, PyAny>) -> PyResult<()> {
        let text = Self::reason(reason)?;
        self.settle(py, |j| j.fail(&text))
    }

    /// Like fail() (or nack() without a reason), but retried after `seconds` at the earliest.
    #[pyo3(signature = (seconds, reason=None))]
    fn fail_after(
        &self,
        py: Python<'_>,
        seconds: &Bound<'_, PyAny>,
        reason: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let wait = delay(seconds, "a delay")?;
        let text = reason.map(Self::reason).transpose()?;
        let job = lock(&self.held).take().ok_or_else(|| Self::settled(py))?;
        // Tells the daemon when it is due (a request): without the GIL.
        py.detach(|| job.fail_after(text.as_deref(), wait)).or_raise(py)
    }

    /// Not run after all: re-queued without counting an attempt.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py, OwnedJob::release)
    }

    /// Sets the lease to `seconds` from now (a heartbeat for a long job).
    fn extend_lease(&self, py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        let lease = lease(seconds)?;
        self.with(py, |j| j.extend_lease(lease))
    }

    /// Gives up the handle now: a job still held is nacked (as when collected).
    fn close(&self) {
        drop(lock(&self.held).take());
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Acks the job when the block ended normally, fails it with the exception otherwise;
    /// a job the block settled itself is left as it is. Never swallows the exception.
    fn __exit__(
        &self,
        py: Python<'_>,
        kind: Option<&Bound<'_, PyType>>,
        value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if lock(&self.held).is_none() {
            return Ok(false);
        }
        let outcome = match kind {
            None => self.ack(py),
            Some(kind) => {
                let value = value.map_or_else(String::new, |v| v.to_string());
                let text = format!("{}: {value}", kind.name()?).replace('\0', " ");
                self.settle(py, |j| j.fail(&text))
            }
        };
        self.close();
        outcome.map(|()| false)
    }
}
