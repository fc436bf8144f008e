//! xtcq's errors as the exceptions of `xtcq.errors`, one class per kind.
//!
//! - The classes are defined in Python (`xtcq/errors.py`): each derives from `XtcqError` and,
//!   where it fits, from a built-in (`InvalidArgument` is a `ValueError`, `Unreachable` a
//!   `ConnectionError`, ...), which a class made in Rust could not do as simply.
//! - Each exception carries the C API's status code (`code`, as in `include/xtcq.h`), so a
//!   program can switch on one number whatever the language; the kinds are mapped here once,
//!   as `capi/src/status.rs` maps them for C.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;
use xtcq_client::{Error, JobError};

/// An error's kind: the name of its class in `xtcq.errors` and the C status code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Invalid,
    Unreachable,
    Unauthorized,
    NoSuchQueue,
    Exists,
    Full,
    TooLarge,
    NotHeld,
    Forked,
    Segment,
    NoRoom,
    Other,
    InUse,
    Resource,
    Mismatch,
    Cancelled,
    Duplicate,
}

impl Kind {
    fn class_and_code(self) -> (&'static str, i32) {
        match self {
            Kind::Invalid => ("InvalidArgument", -1),
            Kind::Unreachable => ("Unreachable", -2),
            Kind::Unauthorized => ("Unauthorized", -3),
            Kind::NoSuchQueue => ("NoSuchQueue", -4),
            Kind::Exists => ("QueueExists", -5),
            Kind::Full => ("Full", -6),
            Kind::TooLarge => ("TooLarge", -7),
            Kind::NotHeld => ("NotHeld", -8),
            Kind::Forked => ("Forked", -9),
            Kind::Segment => ("SegmentError", -10),
            Kind::NoRoom => ("NoRoom", -11),
            Kind::Other => ("XtcqError", -14),
            Kind::InUse => ("InUse", -15),
            Kind::Resource => ("OutOfResources", -16),
            Kind::Mismatch => ("QueueMismatch", -17),
            Kind::Cancelled => ("JobCancelled", -18),
            Kind::Duplicate => ("DuplicateKey", -19),
        }
    }
}

/// The kind of a client error (the C API's mapping, `capi/src/status.rs`).
pub(crate) fn kind_of(e: &Error) -> Kind {
    match e {
        // Before the others: the same EMFILE reads as "unreachable" from a connect and as a
        // segment error from an attach, and neither is what is wrong.
        _ if e.is_out_of_resources() => Kind::Resource,
        Error::Unauthorized(_) | Error::UntrustedDaemon { .. } => Kind::Unauthorized,
        _ if e.is_unreachable() => Kind::Unreachable,
        // No exception of its own, as in C: the message says which was missing.
        Error::NoSuchQueue(_) | Error::NoSuchBatch(_) => Kind::NoSuchQueue,
        Error::QueueExists(_) => Kind::Exists,
        Error::QueueMismatch { .. } => Kind::Mismatch,
        Error::QueueFull { .. } | Error::RecordsFull(_) => Kind::Full,
        Error::PayloadTooLarge { .. } => Kind::TooLarge,
        Error::Job(JobError::LeaseExpired { .. } | JobError::NotHeld { .. }) => Kind::NotHeld,
        Error::Job(JobError::Cancelled { .. }) => Kind::Cancelled,
        Error::Job(JobError::Requeue { .. }) => Kind::Full,
        Error::NoFreeDeque { .. }
        | Error::NoFreeSlot(_)
        | Error::QueueTableFull(_)
        | Error::NoRoom(_)
        | Error::LimitReached(_) => Kind::NoRoom,
        Error::Segment(_)
        | Error::Corrupt(_)
        | Error::SegmentReplaced { .. }
        | Error::SegmentLost { .. }
        | Error::SlotNotResumed { .. }
        | Error::Queue(_)
        | Error::Job(_) => Kind::Segment,
        Error::BadRequest(_) | Error::BadQueueName(_) | Error::Lease(_) | Error::Priority { .. } => {
            Kind::Invalid
        }
        Error::QueueInUse { .. } | Error::QueueNotEmpty { .. } => Kind::InUse,
        Error::Forked => Kind::Forked,
        Error::DuplicateKey { .. } => Kind::Duplicate,
        // A full key table, or none (xtcqd --keys), or its entry locked too long.
        Error::KeyRefused(_) => Kind::NoRoom,
        _ => Kind::Other,
    }
}

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The exception of `kind` with `message`, its `code` set.
pub(crate) fn exception(py: Python<'_>, kind: Kind, message: impl Into<String>) -> PyErr {
    let (class, code) = kind.class_and_code();
    let made = ERRORS
        .get_or_try_init(py, || py.import("xtcq.errors").map(Bound::unbind))
        .and_then(|m| m.bind(py).getattr(class))
        .and_then(|cls| cls.call1((code, message.into())));
    match made {
        Ok(value) => PyErr::from_value(value),
        // xtcq.errors could not be imported (a broken install): that error says why.
        Err(e) => e,
    }
}

/// `InvalidArgument(message)`.
pub(crate) fn invalid(py: Python<'_>, message: impl Into<String>) -> PyErr {
    exception(py, Kind::Invalid, message)
}

/// The exception for a client error (a `DuplicateKey` with its `existing` job's id).
pub(crate) fn from_error(py: Python<'_>, e: &Error) -> PyErr {
    let err = exception(py, kind_of(e), e.to_string());
    if let Error::DuplicateKey { existing, .. } = e {
        // Best effort, as `with_queued`.
        let _ = err.value(py).setattr("existing", existing.to_string());
    }
    err
}

/// Converts a client result, raising its exception.
pub(crate) trait OrRaise<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrRaise<T> for Result<T, Error> {
    #[inline]
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| from_error(py, &e))
    }
}

/// Sets `queued` (how many of a batch went in before the failure) on an exception.
pub(crate) fn with_queued(py: Python<'_>, err: PyErr, queued: usize) -> PyErr {
    // Best effort: an exception that refuses attributes keeps its own message.
    let _ = err.value(py).setattr("queued", queued);
    err
}
