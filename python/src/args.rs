//! Python arguments as the client takes them, each checked with a message naming the
//! argument: nothing is wrapped, truncated or rounded into another value silently.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyInt, PyMemoryView, PyString};

use crate::error::invalid;

/// A payload: `bytes` as they are, `str` as UTF-8, anything else `bytes()` takes (a
/// `bytearray`, a `memoryview`), but not an `int` (`bytes(5)` would be five zero bytes).
pub(crate) fn payload<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Payload<'py>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Payload::Bytes(b.clone()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Payload::Text(s.to_cow()?.into_owned()));
    }
    let py = obj.py();
    if obj.is_instance_of::<PyInt>() {
        return Err(invalid(py, format!("a payload is bytes or str, not {}", type_name(obj))));
    }
    match py.get_type::<PyBytes>().call1((obj,)) {
        Ok(b) => Ok(Payload::Bytes(b.cast_into::<PyBytes>()?)),
        Err(_) => Err(invalid(py, format!("a payload is bytes or str, not {}", type_name(obj)))),
    }
}

/// A payload's bytes, borrowed from the Python object where it is `bytes`.
pub(crate) enum Payload<'py> {
    Bytes(Bound<'py, PyBytes>),
    Text(String),
}

impl Payload<'_> {
    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Payload::Bytes(b) => b.as_bytes(),
            Payload::Text(s) => s.as_bytes(),
        }
    }
}

/// Whether `obj` is one payload (a common mistake for a batch of them).
pub(crate) fn is_one_payload(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyByteArray>()
        || obj.is_instance_of::<PyMemoryView>()
}

/// The name of `obj`'s type, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// A `str` argument as the client takes it: no NUL inside (a path or a name cut there by
/// C would be another one).
pub(crate) fn text(py: Python<'_>, value: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    let Ok(s) = value.cast::<PyString>() else {
        return Err(invalid(py, format!("{what} is a str, not {}", type_name(value))));
    };
    let s = s.to_cow()?;
    if s.contains('\0') {
        return Err(invalid(py, format!("{what} contains a NUL character: {s:?}")));
    }
    Ok(s.into_owned())
}

/// An unsigned 32-bit argument named `what`; not a bool, not a float.
pub(crate) fn u32_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u32> {
    let bad = || invalid(obj.py(), format!("{what} must be an int from 0 to 4294967295, not {}", repr(obj)));
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(bad());
    }
    obj.extract::<u32>().map_err(|_| bad())
}

/// `repr(obj)`, for messages.
pub(crate) fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| type_name(obj))
}

/// A number of seconds named `what`: an int or a float, not a bool; `Err` says why not.
fn seconds(obj: &Bound<'_, PyAny>, what: &str, expect: &str) -> PyResult<f64> {
    let bad = || invalid(obj.py(), format!("{what} is {expect}, not {}", repr(obj)));
    if obj.is_instance_of::<PyBool>() || obj.is_instance_of::<PyString>() {
        return Err(bad());
    }
    let s = obj.extract::<f64>().map_err(|_| bad())?;
    if s.is_nan() {
        return Err(invalid(obj.py(), format!("{what} is nan; give {expect}")));
    }
    if s < 0.0 {
        return Err(bad());
    }
    Ok(s)
}

/// How long a steal may wait (its `timeout`): not at all (0, the default), without a limit
/// (None, inf, or a time too long for the clock), or up to a time. Negative and `nan` are
/// refused, naming `timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    No,
    Forever,
    For(Duration),
}

impl<'a, 'py> FromPyObject<'a, 'py> for Wait {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.is_none() {
            return Ok(Wait::Forever);
        }
        let s = seconds(&obj, "timeout", "seconds >= 0, or None (or inf) to wait without a limit")?;
        Ok(match Duration::try_from_secs_f64(s) {
            Ok(Duration::ZERO) => Wait::No,
            Ok(d) => Wait::For(d),
            Err(_) => Wait::Forever,
        })
    }
}

/// A delay in whole milliseconds (a delayed push, a retry after): 0 up, finite.
pub(crate) fn delay(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let s = seconds(obj, what, "seconds from 0 up (a finite number)")?;
    let ms = s * 1000.0;
    if ms >= u64::MAX as f64 {
        return Err(invalid(
            obj.py(),
            format!("{what} is seconds from 0 up (a finite number), not {}", repr(obj)),
        ));
    }
    Ok(Duration::from_millis(ms as u64))
}

/// A lease in whole milliseconds: 0 to 4294967 s (what the segment's u32 of ms holds).
pub(crate) fn lease(obj: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let expect = "seconds from 0 to 4294967";
    let s = seconds(obj, "a lease", expect)?;
    let ms = s * 1000.0;
    if ms > u32::MAX as f64 {
        return Err(invalid(obj.py(), format!("a lease is {expect}, not {}", repr(obj))));
    }
    Ok(Duration::from_millis(ms as u64))
}
