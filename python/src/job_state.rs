//! A job's fate as a Python dict (`Client.job_state`): its state's name and what that state
//! tells, the same names as the Rust `JobState` and `xtcq job`.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use xtcq_client::JobState;

/// `state` as a dict: "state" and the fields of that state.
pub(crate) fn to_dict(py: Python<'_>, state: JobState) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let name = match state {
        JobState::Unknown => "unknown",
        JobState::BeingPushed => "being_pushed",
        JobState::Queued { attempts } => {
            d.set_item("attempts", attempts)?;
            "queued"
        }
        JobState::Delayed { due_in_ms, attempts } => {
            d.set_item("attempts", attempts)?;
            d.set_item("due_in_ms", due_in_ms)?;
            "delayed"
        }
        JobState::Running { pid, lease_left_ms, attempts } => {
            d.set_item("attempts", attempts)?;
            d.set_item("pid", pid)?;
            d.set_item("lease_left_ms", lease_left_ms)?;
            "running"
        }
        JobState::Dead { attempts, last_error } => {
            d.set_item("attempts", attempts)?;
            d.set_item("last_error", last_error)?;
            "dead"
        }
        JobState::Finished => "finished",
        JobState::Cancelled => "cancelled",
    };
    d.set_item("state", name)?;
    Ok(d)
}
