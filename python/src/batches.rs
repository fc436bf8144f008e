//! Batches from Python: `Client.open_batch`, `seal_batch`, `batch_progress`, `wait_batch`
//! and `Owner.set_batch`. A batch's counts come back as a dict: `name`, `status` ("open",
//! "sealed" or "complete"), `pushed`, `running`, `acked`, `dead`, `cancelled`.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use xtcq_client::{BatchInfo, BatchStatus, OnComplete};

use crate::args::{payload, text, Wait};
use crate::client::Client;
use crate::error::OrRaise;
use crate::producer::Owner;

fn info_dict<'py>(py: Python<'py>, b: &BatchInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &b.name)?;
    d.set_item(
        "status",
        match b.status {
            BatchStatus::Open => "open",
            BatchStatus::Sealed => "sealed",
            BatchStatus::Complete => "complete",
        },
    )?;
    for (k, v) in [
        ("pushed", b.pushed),
        ("running", b.running),
        ("acked", b.acked),
        ("dead", b.dead),
        ("cancelled", b.cancelled),
    ] {
        d.set_item(k, v)?;
    }
    Ok(d)
}

impl Client {
    /// Opens batch `name` of queue `queue`; `on_complete` (bytes or str) is a callback job
    /// pushed once into `on_complete_queue` (None: `queue`) when the batch completes.
    pub(crate) fn open_batch_py<'py>(
        &self,
        py: Python<'py>,
        queue: &Bound<'py, PyAny>,
        name: &Bound<'py, PyAny>,
        on_complete: Option<&Bound<'py, PyAny>>,
        on_complete_queue: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (queue, name) = (text(py, queue, "a queue name")?, text(py, name, "a batch name")?);
        let on_complete = match on_complete {
            None => None,
            Some(p) => Some(OnComplete {
                queue: match on_complete_queue {
                    Some(q) => text(py, q, "a queue name")?,
                    None => queue.clone(),
                },
                payload: payload(p)?.as_bytes().to_vec(),
            }),
        };
        let client = self.live(py)?;
        let info = py.detach(|| client.open_batch(&queue, &name, on_complete)).or_raise(py)?;
        info_dict(py, &info)
    }

    /// Seals batch `name`: it takes no more jobs, and completes when its last job ended.
    pub(crate) fn seal_batch_py<'py>(
        &self,
        py: Python<'py>,
        queue: &Bound<'py, PyAny>,
        name: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.batch_call(py, queue, name, |c, q, n| c.seal_batch(q, n))
    }

    /// Batch `name`'s counts, as the daemon last counted them.
    pub(crate) fn batch_progress_py<'py>(
        &self,
        py: Python<'py>,
        queue: &Bound<'py, PyAny>,
        name: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.batch_call(py, queue, name, |c, q, n| c.batch_progress(q, n))
    }

    /// `call` on the live client with the queue and batch names read from Python (the GIL
    /// released), its batch as a dict.
    fn batch_call<'py>(
        &self,
        py: Python<'py>,
        queue: &Bound<'py, PyAny>,
        name: &Bound<'py, PyAny>,
        call: impl FnOnce(&xtcq_client::Client, &str, &str) -> Result<BatchInfo, xtcq_client::Error> + Send,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (queue, name) = (text(py, queue, "a queue name")?, text(py, name, "a batch name")?);
        let client = self.live(py)?;
        let info = py.detach(|| call(&client, &queue, &name)).or_raise(py)?;
        info_dict(py, &info)
    }

    /// Sleeps (the GIL released) until batch `name` is complete, then its counts; None when
    /// `timeout` seconds passed first (None or inf: no limit).
    pub(crate) fn wait_batch_py<'py>(
        &self,
        py: Python<'py>,
        queue: &Bound<'py, PyAny>,
        name: &Bound<'py, PyAny>,
        timeout: Wait,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let (queue, name) = (text(py, queue, "a queue name")?, text(py, name, "a batch name")?);
        let limit = match timeout {
            Wait::No => Some(std::time::Duration::ZERO),
            Wait::Forever => None,
            Wait::For(d) => Some(d),
        };
        let client = self.live(py)?;
        let done = py.detach(|| client.wait_batch(&queue, &name, limit)).or_raise(py)?;
        done.map(|info| info_dict(py, &info)).transpose()
    }
}

impl Owner {
    /// Makes every later push join batch `name` of this owner's queue (None: no batch),
    /// looked up through `client`.
    pub(crate) fn set_batch_py(
        &self,
        py: Python<'_>,
        client: &Client,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let info = match name {
            None => None,
            Some(n) => {
                let n = text(py, n, "a batch name")?;
                let c = client.live(py)?;
                let queue = self.queue.clone();
                Some(py.detach(|| c.batch_progress(&queue, &n)).or_raise(py)?)
            }
        };
        self.with_handle(py, |h| h.set_batch(info.as_ref()))
    }
}
