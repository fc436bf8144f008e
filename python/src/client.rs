//! `xtcq.Client`: a connection to xtcqd, and the queues made and attached through it.
//!
//! - Every call that talks to the daemon (connect, create, delete, check, attach) runs with
//!   the GIL released: other threads go on while it waits for the answer.
//! - Thread-safe: the client is cloned out of its lock for each call, so `close()` from one
//!   thread never waits for another thread's request.

use std::path::Path;
use std::sync::RwLock;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use xtcq_client::{Client as RustClient, CreateOptions, Flavor, QueueParams};

use crate::args::{text, u32_arg};
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

    /// Creates a queue (0: the defaults of 4 deques of 1024 jobs, no attempt limit, no lease).
    #[pyo3(
        signature = (name, deques=None, capacity=None, max_attempts=None, lease_ms=None, fifo=false, exist_ok=false),
        text_signature = "($self, name, deques=0, capacity=0, max_attempts=0, lease_ms=0, fifo=False, exist_ok=False)"
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
    ) -> PyResult<()> {
        let size = |v: Option<&Bound<'_, PyAny>>, what| v.map_or(Ok(0), |v| u32_arg(v, what));
        let mut p = QueueParams::new(Self::name(py, name)?);
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
