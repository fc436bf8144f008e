//! `xtcq.Owner` and `xtcq.Injector`: producers.
//!
//! - A push is a few stores in shared memory and no system call (a futex wake only when a
//!   consumer sleeps): it keeps the GIL, as releasing it would cost more than the push.
//! - Each handle is behind a mutex: the engine's owner is one thread's at a time, and a
//!   handle closed by one thread is never used by another mid-call. An owner's mutex is
//!   never held without the GIL; an injector's is during a delayed push (a request), so it
//!   is taken with `lock_py`.
//! - Dropping or closing an owner gives its deque's lease back to the daemon (a request):
//!   that runs with the GIL released.

use std::sync::{Mutex, MutexGuard};

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use xtcq_client::{Due, InjectorHandle, OnDuplicate, OwnerHandle, Pushed};

use crate::args::{delay, is_one_payload, payload, type_name, Payload};
use crate::error::{exception, invalid, with_queued, Kind, OrRaise};
use crate::job::Job;
use crate::{drop_detached, lock, lock_py};

/// A key argument: bytes or str of 1 to 64 bytes.
fn key_arg<'py>(py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Payload<'py>> {
    let k = self::payload(key)?;
    let n = k.as_bytes().len();
    if n == 0 || n > xtcq_client::MAX_KEY_LEN {
        return Err(invalid(py, format!("a key is 1 to {} bytes, not {n}", xtcq_client::MAX_KEY_LEN)));
    }
    Ok(k)
}

/// A unique job is pushed at priority 0: refuses another priority with a key.
fn keyed_at_zero(py: Python<'_>, priority: u32) -> PyResult<()> {
    if priority == 0 {
        return Ok(());
    }
    Err(invalid(
        py,
        format!("a job with a key is pushed at priority 0, not {priority}; push it without the key"),
    ))
}

fn on_duplicate(or_existing: bool) -> OnDuplicate {
    if or_existing {
        OnDuplicate::ReturnExisting
    } else {
        OnDuplicate::Refuse
    }
}

/// What a push with a key returns: the id of the job that holds the key, and whether it is
/// the one just pushed.
fn keyed(r: Result<Pushed, xtcq_client::Error>, py: Python<'_>) -> PyResult<Option<(String, bool)>> {
    let pushed = r.or_raise(py)?;
    Ok(Some((pushed.id().to_string(), matches!(pushed, Pushed::New(_)))))
}

/// Most jobs the engine puts in a deque with one store of `bottom`: a longer batch is
/// queued in chunks of this many (the C API's XTCQ_MAX_BATCH).
pub(crate) const MAX_BATCH: usize = 128;

/// Owns one deque of a queue. One thread at a time.
#[pyclass(frozen, module = "xtcq")]
pub struct Owner {
    inner: Mutex<Option<OwnerHandle>>,
    /// The queue's name.
    #[pyo3(get)]
    pub(crate) queue: String,
}

impl Owner {
    pub(crate) fn new(handle: OwnerHandle, queue: String) -> Self {
        Self { inner: Mutex::new(Some(handle)), queue }
    }

    fn live<'a>(guard: &'a MutexGuard<'_, Option<OwnerHandle>>, py: Python<'_>) -> PyResult<&'a OwnerHandle> {
        guard.as_ref().ok_or_else(|| invalid(py, "Owner is closed"))
    }

    /// `f` with the live handle, under its lock.
    pub(crate) fn with_handle<T>(&self, py: Python<'_>, f: impl FnOnce(&OwnerHandle) -> T) -> PyResult<T> {
        let guard = lock(&self.inner);
        Ok(f(Self::live(&guard, py)?))
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(h) = self.inner.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            drop_detached(h);
        }
    }
}

#[pymethods]
impl Owner {
    /// Makes every later push join batch `name` of this owner's queue (None: no batch),
    /// looked up through `client`.
    #[pyo3(signature = (client, name))]
    fn set_batch(
        &self,
        py: Python<'_>,
        client: &Bound<'_, crate::client::Client>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.set_batch_py(py, client.get(), name)
    }

    /// Queues a job (bytes or str) at `priority` (0 the most urgent, up to the queue's levels
    /// minus 1). Raises Full when the deque and the ring are full, Invalid for a priority
    /// past the queue's levels. With `key` (bytes or str, 1 to 64 bytes), a unique job (at
    /// priority 0): returns `(id, True)`; while a live job of the queue holds the key, raises
    /// DuplicateKey (its `existing` that job's id), or with `or_existing` pushes nothing and
    /// returns `(id, False)` of that job.
    #[pyo3(signature = (payload, priority = 0, key = None, or_existing = false))]
    fn push(
        &self,
        py: Python<'_>,
        payload: &Bound<'_, PyAny>,
        priority: u32,
        key: Option<&Bound<'_, PyAny>>,
        or_existing: bool,
    ) -> PyResult<Option<(String, bool)>> {
        let data = self::payload(payload)?;
        let guard = lock(&self.inner);
        let owner = Self::live(&guard, py)?;
        let Some(key) = key else {
            return owner.push_priority(data.as_bytes(), priority).map(|_| None).or_raise(py);
        };
        keyed_at_zero(py, priority)?;
        let key = key_arg(py, key)?;
        keyed(owner.push_with_key(data.as_bytes(), key.as_bytes(), on_duplicate(or_existing)), py)
    }

    /// Queues every payload in order, up to 128 at a time with one store in the deque; what
    /// the deque has no room for goes to the overflow ring. Returns how many were queued (all
    /// of them). A bad payload raises before any is queued; a failure part-way (Full) raises
    /// with `.queued`: the first `.queued` payloads were queued, the rest were not.
    fn push_batch(&self, py: Python<'_>, payloads: &Bound<'_, PyAny>) -> PyResult<usize> {
        let datas = batch(payloads)?;
        let guard = lock(&self.inner);
        let owner = Self::live(&guard, py).map_err(|e| with_queued(py, e, 0))?;
        let max = owner.payload_capacity() as usize;
        if let Some((i, d)) = datas.iter().enumerate().find(|(_, d)| d.as_bytes().len() > max) {
            let message = format!(
                "payload {i} of the batch is too large: {} > {max} bytes, the largest this segment \
                 takes (xtcqd --payload-bytes); nothing of the batch was queued",
                d.as_bytes().len()
            );
            return Err(with_queued(py, exception(py, Kind::TooLarge, message), 0));
        }
        let slices: Vec<&[u8]> = datas.iter().map(Payload::as_bytes).collect();
        let mut done = 0;
        while done < slices.len() {
            let chunk = &slices[done..slices.len().min(done + MAX_BATCH)];
            let step = match owner.push_batch(chunk) {
                // The deque is full: this one spills to the overflow ring.
                Ok(0) => owner.push(chunk[0]).map(|_| 1),
                other => other,
            };
            match step {
                Ok(k) => done += k,
                Err(e) => return Err(with_queued(py, crate::error::from_error(py, &e), done)),
            }
        }
        Ok(done)
    }

    /// The owner's next job, or None.
    fn pop(&self, py: Python<'_>) -> PyResult<Option<Job>> {
        let guard = lock(&self.inner);
        let job = Self::live(&guard, py)?.pop().or_raise(py)?;
        Ok(job.map(|j| Job::new(j.into_owned())))
    }

    /// Gives the deque back now (also done when the object is collected); jobs left in it
    /// stay there for thieves.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = lock(&self.inner).take();
        match taken {
            Some(h) => py.detach(|| h.detach()).or_raise(py),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py)
    }
}

/// The payloads of a batch, each converted; a bad one (or a single payload passed as the
/// batch) raises `InvalidArgument` with `queued` 0 before anything is queued.
fn batch<'py>(payloads: &Bound<'py, PyAny>) -> PyResult<Vec<Payload<'py>>> {
    let py = payloads.py();
    let refuse = |e: PyErr| with_queued(py, e, 0);
    if is_one_payload(payloads) {
        let message = format!("payloads is a sequence of payloads, not one {}", type_name(payloads));
        return Err(refuse(invalid(py, message)));
    }
    if let Ok(list) = payloads.cast::<PyList>() {
        return list.iter().map(|p| payload(&p).map_err(refuse)).collect();
    }
    let Ok(iter) = payloads.try_iter() else {
        let message =
            format!("payloads is a sequence of payloads (bytes or str), not {}", type_name(payloads));
        return Err(refuse(invalid(py, message)));
    };
    iter.map(|p| p.and_then(|p| payload(&p)).map_err(refuse)).collect()
}

/// Pushes onto a queue's overflow ring. One thread at a time.
#[pyclass(frozen, module = "xtcq")]
pub struct Injector {
    inner: Mutex<Option<InjectorHandle>>,
    /// The queue's name.
    #[pyo3(get)]
    queue: String,
}

impl Injector {
    pub(crate) fn new(handle: InjectorHandle, queue: String) -> Self {
        Self { inner: Mutex::new(Some(handle)), queue }
    }

    fn closed(py: Python<'_>) -> PyErr {
        invalid(py, "Injector is closed")
    }
}

#[pymethods]
impl Injector {
    /// Queues a job (bytes or str) at `priority` (0 the most urgent, up to the queue's levels
    /// minus 1). Raises Full when the ring is full, Invalid for a priority past the levels.
    /// `key` and `or_existing` as `Owner.push`.
    #[pyo3(signature = (payload, priority = 0, key = None, or_existing = false))]
    fn push(
        &self,
        py: Python<'_>,
        payload: &Bound<'_, PyAny>,
        priority: u32,
        key: Option<&Bound<'_, PyAny>>,
        or_existing: bool,
    ) -> PyResult<Option<(String, bool)>> {
        let data = self::payload(payload)?;
        let guard = lock_py(py, &self.inner);
        let inj = guard.as_ref().ok_or_else(|| Self::closed(py))?;
        let Some(key) = key else {
            return inj.push_priority(data.as_bytes(), priority).map(|_| None).or_raise(py);
        };
        keyed_at_zero(py, priority)?;
        let key = key_arg(py, key)?;
        keyed(inj.push_with_key(data.as_bytes(), key.as_bytes(), on_duplicate(or_existing)), py)
    }

    /// Queues a job that no consumer sees for `seconds` (the daemon puts it in line then), at
    /// `priority`, the level it joins once due.
    #[pyo3(signature = (payload, seconds, priority=0))]
    fn push_delayed(
        &self,
        py: Python<'_>,
        payload: &Bound<'_, PyAny>,
        seconds: &Bound<'_, PyAny>,
        priority: u32,
    ) -> PyResult<()> {
        let data = self::payload(payload)?;
        let wait: Duration = delay(seconds, "a delay")?;
        // Tells the daemon (a request): without the GIL. The payload is copied out first,
        // as a borrowed Python object may not cross into code that runs without it.
        // The handle (Send, not Sync) moves out and back, the mutex held meanwhile.
        let bytes = data.as_bytes().to_vec();
        let mut guard = lock_py(py, &self.inner);
        let h = guard.take().ok_or_else(|| Self::closed(py))?;
        let (h, done) = py.detach(move || {
            let done = h.push_delayed_priority(&bytes, Due::In(wait), priority).map(drop);
            (h, done)
        });
        *guard = Some(h);
        done.or_raise(py)
    }

    /// Closes the handle now (also done when the object is collected).
    fn close(&self, py: Python<'_>) {
        let taken = lock_py(py, &self.inner).take();
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
