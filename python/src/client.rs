//! `xtcq.Client`: a connection to xtcqd, and the queues made and attached through it.
//!
//! - Every call that talks to the daemon (connect, create, delete, check, attach) runs with
//!   the GIL released: other threads go on while it waits for the answer.
//! - Thread-safe: the client is cloned out of its lock for each call, so `close()` from one
//!   thread never waits for another thread's request.

use std::path::Path;
use std::sync::RwLock;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use xtcq_client::{Client as RustClient, CreateOptions, Flavor, QueueParams};

use crate::args::{text, u32_arg, Wait};
use crate::error::{invalid, OrRaise};
use crate::producer::{Injector, Owner};
use crate::thief::Thief;

/// A connection to xtcqd: `socket` None means $XTCQ_SOCKET, else the default path.
/// Connect in each process, after fork(). Thread-safe.
#[pyclass(frozen, module = "xtcq")]
pub struct Client {
    inner: RwLock<Option<RustClient>>,
}

impl Client {
    /// The connection, or `InvalidArgument` once closed.
    pub(crate) fn live(&self, py: Python<'_>) -> PyResult<RustClient> {
        match &*self.inner.read().unwrap_or_else(|p| p.into_inner()) {
            Some(c) => Ok(c.clone()),
            None => Err(invalid(py, "Client is closed")),
        }
    }

    /// A queue name as an argument: a str without NUL.
    fn name(py: Python<'_>, queue: &Bound<'_, PyAny>) -> PyResult<String> {
        text(py, queue, "a queue name")
    }

    /// A job id as an argument: "index.birth", as `Job.id` gives it.
    fn job_id(py: Python<'_>, job_id: &Bound<'_, PyAny>) -> PyResult<xtcq_client::JobId> {
        let id_text = text(py, job_id, "job_id")?;
        id_text.parse().map_err(|_| {
            invalid(
                py,
                format!("job_id {id_text:?} is not a job id; give it as Job.id prints it (like 12.3)"),
            )
        })
    }
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (socket=None))]
    fn new(py: Python<'_>, socket: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        // A pathlib.Path is as good as a str: what the old ctypes layer took, str(socket).
        let path = match socket {
            None => None,
            Some(s) => Some(text(py, s.str()?.as_any(), "the socket path")?),
        };
        let client = py.detach(|| RustClient::connect(path.as_deref().map(Path::new))).or_raise(py)?;
        Ok(Self { inner: RwLock::new(Some(client)) })
    }

    /// Creates a queue (0: the defaults of 4 deques of 1024 jobs, no attempt limit, no lease),
    /// with `levels` priority levels (1 to 8, each with `deques` deques) and `aging` (every
    /// `aging`-th job a consumer takes comes from the least urgent non-empty level; 0: never).
    #[pyo3(
        signature = (name, deques=None, capacity=None, max_attempts=None, lease_ms=None, fifo=false, exist_ok=false, levels=None, aging=None),
        text_signature = "($self, name, deques=0, capacity=0, max_attempts=0, lease_ms=0, fifo=False, exist_ok=False, levels=1, aging=0)"
    )]
    #[allow(clippy::too_many_arguments)] // the Python signature, keyword arguments
    fn create_queue(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        deques: Option<&Bound<'_, PyAny>>,
        capacity: Option<&Bound<'_, PyAny>>,
        max_attempts: Option<&Bound<'_, PyAny>>,
        lease_ms: Option<&Bound<'_, PyAny>>,
        fifo: bool,
        exist_ok: bool,
        levels: Option<&Bound<'_, PyAny>>,
        aging: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let size = |v: Option<&Bound<'_, PyAny>>, what| v.map_or(Ok(0), |v| u32_arg(v, what));
        let mut p = QueueParams::new(Self::name(py, name)?);
        p.levels = size(levels, "levels")?.max(1);
        p.aging = size(aging, "aging")?;
        let (d, c) = (size(deques, "deques")?, size(capacity, "capacity")?);
        p.max_attempts = size(max_attempts, "max_attempts")?;
        p.lease_ms = size(lease_ms, "lease_ms")?;
        if d != 0 {
            p.deques = d;
        }
        if c != 0 {
            p.capacity = c;
        }
        if fifo {
            p.flavor = Flavor::Fifo;
        }
        let client = self.live(py)?;
        let options = CreateOptions { exist_ok, ..Default::default() };
        py.detach(|| client.create_queue_with(&p, &options)).map(drop).or_raise(py)
    }

    /// Deletes a queue. Refused (InUse) while a process is attached to it, force or not
    /// (a process stays attached until it exits); without `force` also while it holds jobs.
    #[pyo3(signature = (name, force=false))]
    fn delete_queue(&self, py: Python<'_>, name: &Bound<'_, PyAny>, force: bool) -> PyResult<()> {
        let name = Self::name(py, name)?;
        let client = self.live(py)?;
        py.detach(|| client.delete_queue(&name, force)).map(drop).or_raise(py)
    }

    /// Pauses a queue: its consumers, in every process, take no job until it is resumed
    /// (jobs being run finish; pushes are still taken). Kept across daemon restarts. Only its
    /// owner, root and the daemon's user may. Whether it was paused already.
    fn pause_queue(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<bool> {
        let name = Self::name(py, name)?;
        let client = self.live(py)?;
        py.detach(|| client.pause_queue(&name)).or_raise(py)
    }

    /// Resumes a paused queue, waking its sleeping consumers. Whether it was paused.
    fn resume_queue(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<bool> {
        let name = Self::name(py, name)?;
        let client = self.live(py)?;
        py.detach(|| client.resume_queue(&name)).or_raise(py)
    }

    /// At most `max` of the queue's jobs claimed at once, across every process (0: no limit).
    fn set_max_running(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        max: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let name = Self::name(py, name)?;
        let max = u32_arg(max, "max")?;
        let client = self.live(py)?;
        py.detach(|| client.set_max_running(&name, max)).or_raise(py)
    }

    /// At most `per_second` of the queue's jobs started a second (a float: 0.5 is one every
    /// two seconds), `burst` of them at once after a quiet spell; `per_second` 0: no limit.
    #[pyo3(signature = (name, per_second, burst=None))]
    fn set_max_rate(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        per_second: f64,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let name = Self::name(py, name)?;
        let burst = burst.map(|b| u32_arg(b, "burst")).transpose()?.unwrap_or(1);
        // One a day at the slowest (the daemon refuses slower), one a nanosecond at the fastest.
        let interval_ns = if per_second == 0.0 {
            0
        } else if per_second.is_finite() && per_second > 0.0 && 1e9 / per_second >= 1.0 {
            (1e9 / per_second).round() as u64
        } else {
            return Err(invalid(
                py,
                format!("per_second must be 0 (no limit) or from 1/86400 to 1e9, not {per_second}"),
            ));
        };
        let limit = xtcq_client::RateLimit { interval_ns, burst: if interval_ns == 0 { 0 } else { burst } };
        let client = self.live(py)?;
        py.detach(|| client.set_max_rate(&name, limit)).or_raise(py)
    }

    /// Opens batch `name` of queue `queue`; `on_complete` (bytes or str) is a callback job
    /// pushed once into `on_complete_queue` (None: `queue`) when the batch completes. Its
    /// counts, as a dict (see `batch_progress`).
    #[pyo3(signature = (queue, name, on_complete=None, on_complete_queue=None))]
    fn open_batch<'py>(
        &self,
        py: Python<'py>,
        queue: &Bound<'py, PyAny>,
        name: &Bound<'py, PyAny>,
        on_complete: Option<&Bound<'py, PyAny>>,
        on_complete_queue: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.open_batch_py(py, queue, name, on_complete, on_complete_queue)
    }

    /// Seals batch `name`: it takes no more jobs, and completes when its last job ended.
    fn seal_batch<'py>(
        &self,
        py: Python<'py>,
        queue: &Bound<'py, PyAny>,
        name: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.seal_batch_py(py, queue, name)
    }

    /// Batch `name`'s counts as a dict: `name`, `status` ("open", "sealed", "complete"),
    /// `pushed`, `running`, `acked`, `dead`, `cancelled`.
    fn batch_progress<'py>(
        &self,
        py: Python<'py>,
        queue: &Bound<'py, PyAny>,
        name: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.batch_progress_py(py, queue, name)
    }

    /// Sleeps (the GIL released) until batch `name` is complete, then its counts; None when
    /// `timeout` seconds passed first (None or inf: no limit).
    #[pyo3(signature = (queue, name, timeout=Wait::Forever), text_signature = "($self, queue, name, timeout=None)")]
    fn wait_batch<'py>(
        &self,
        py: Python<'py>,
        queue: &Bound<'py, PyAny>,
        name: &Bound<'py, PyAny>,
        timeout: Wait,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.wait_batch_py(py, queue, name, timeout)
    }

    /// Cancels job `job_id` ("index.birth", as `Job.id` and `xtcq push --print-handle` give
    /// it): a queued or delayed job never runs, a running one is taken from its holder and
    /// its `xtcq work` command stopped. What it did: "was_queued", "was_delayed",
    /// "was_running", "not_stopped" (a dead letter now), "finished", "dead",
    /// "being_pushed", "busy" (its holder was mid give-back: try again) or "unknown".
    fn cancel_job(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        job_id: &Bound<'_, PyAny>,
    ) -> PyResult<&'static str> {
        let name = Self::name(py, name)?;
        let id = Self::job_id(py, job_id)?;
        let client = self.live(py)?;
        let out = py.detach(|| client.cancel_job(&name, id)).or_raise(py)?;
        use xtcq_client::CancelOutcome as C;
        Ok(match out {
            C::WasQueued => "was_queued",
            C::WasDelayed => "was_delayed",
            C::WasRunning { .. } => "was_running",
            C::NotStopped { .. } => "not_stopped",
            C::Finished => "finished",
            C::Dead => "dead",
            C::BeingPushed => "being_pushed",
            C::Busy => "busy",
            C::Unknown => "unknown",
        })
    }

    /// What became of job `job_id` ("index.birth"): a dict with "state" ("unknown",
    /// "being_pushed", "queued", "delayed", "running", "dead", "finished" or "cancelled") and
    /// what that state tells: "attempts"; "due_in_ms" (delayed); "pid" (running: None while
    /// the daemon stops a job it took back) and "lease_left_ms" (None without a lease);
    /// "last_error" (dead). A finished or cancelled job is "unknown" once its record holds
    /// another job.
    fn job_state<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'_, PyAny>,
        job_id: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let name = Self::name(py, name)?;
        let id = Self::job_id(py, job_id)?;
        let client = self.live(py)?;
        let state = py.detach(|| client.job_state(&name, id)).or_raise(py)?;
        crate::job_state::to_dict(py, state)
    }

    /// The segment's problems, one message each (empty: consistent). `quiescent` also
    /// asserts that nothing is in flight.
    #[pyo3(signature = (quiescent=false))]
    fn check(&self, py: Python<'_>, quiescent: bool) -> PyResult<Vec<String>> {
        let client = self.live(py)?;
        py.detach(|| client.check(quiescent)).map(|r| r.problems).or_raise(py)
    }

    /// Takes a free deque of `queue` as its owner (a producer).
    fn owner(&self, py: Python<'_>, queue: &Bound<'_, PyAny>) -> PyResult<Owner> {
        let name = Self::name(py, queue)?;
        let client = self.live(py)?;
        let handle = py.detach(|| client.attach_owner(&name)).or_raise(py)?;
        Ok(Owner::new(handle, name))
    }

    /// A producer without a deque: pushes go to the queue's overflow ring.
    fn injector(&self, py: Python<'_>, queue: &Bound<'_, PyAny>) -> PyResult<Injector> {
        let name = Self::name(py, queue)?;
        let client = self.live(py)?;
        let handle = py.detach(|| client.attach_injector(&name)).or_raise(py)?;
        Ok(Injector::new(handle, name))
    }

    /// A consumer of `queue`.
    fn thief(&self, py: Python<'_>, queue: &Bound<'_, PyAny>) -> PyResult<Thief> {
        let name = Self::name(py, queue)?;
        let client = self.live(py)?;
        let handle = py.detach(|| client.attach_thief(&name)).or_raise(py)?;
        Ok(Thief::new(handle, name))
    }

    /// Closes the connection now (also done when the object is collected). Handles
    /// attached through it keep it open until they are closed too.
    fn close(&self, py: Python<'_>) {
        let taken = self.inner.write().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(|| drop(taken));
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) {
        self.close(py);
    }
}
