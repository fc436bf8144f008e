//! Calls added for the PostgreSQL extension (`postgres/`): a push that says the job's id,
//! and a queue's counters and dead letters as JSON, so SQL can show them as rows without
//! a C struct per answer.
//!
//! - The JSON calls fill a caller's buffer: `XTCQ_E_BUFFER_TOO_SMALL` stores the length
//!   needed (with its NUL), so a caller asks twice at most.
//! - A job id is `index << 32 | birth`, the `index.birth` that `xtcq work`, `xtcq dead` and
//!   the daemon's logs print, packed into one integer (a SQL `bigint`).

use std::ffi::{c_char, c_int};

use ::xtcq_client::{Due, JobId};
use serde_json::{json, Value};

use crate::client::{not_forked, xtcq_client};
use crate::entry::{arg, c_str, guarded, shared};
use crate::producer::{payload_arg, xtcq_injector};
use crate::status::{fail, from_error, XTCQ_E_BUFFER_TOO_SMALL, XTCQ_E_INVALID, XTCQ_OK};

/// `id` packed as one integer: `index << 32 | birth`.
pub(crate) fn packed(id: JobId) -> u64 {
    (u64::from(id.index) << 32) | u64::from(id.birth)
}

/// Queues a job of `len` bytes on the queue's overflow ring, held back `delay_ms` when that
/// is not 0 (as `xtcq_injector_push_delayed`), and stores its id in `*id`: `index << 32 |
/// birth`, the `index.birth` that `xtcq work` and `xtcq dead` print.
///
/// # Safety
/// As `xtcq_injector_push`; `id` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn xtcq_injector_push_id(
    injector: *mut xtcq_injector,
    data: *const u8,
    len: usize,
    delay_ms: u64,
    id: *mut u64,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { xtcq_injector_push_at(injector, data, len, delay_ms, 0, id) }
}

/// As [`xtcq_injector_push_id`], at `priority` (0 the most urgent; see
/// `xtcq_injector_push_priority`): the level the job joins now, or once due.
/// `XTCQ_E_INVALID` for a priority past the queue's levels.
///
/// # Safety
/// As `xtcq_injector_push`; `id` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn xtcq_injector_push_at(
    injector: *mut xtcq_injector,
    data: *const u8,
    len: usize,
    delay_ms: u64,
    priority: u32,
    id: *mut u64,
) -> c_int {
    guarded(|| {
        if id.is_null() {
            return fail(XTCQ_E_INVALID, "id is NULL");
        }
        // SAFETY: the caller's contract.
        let (i, bytes) = match unsafe { (arg(injector, "injector"), payload_arg(data, len)) } {
            (Ok(i), Ok(b)) => (i, b),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        if let Err(code) = not_forked(i.born) {
            return code;
        }
        let pushed = if delay_ms == 0 {
            i.inner.push_priority(bytes, priority)
        } else {
            i.inner.push_delayed_priority(
                bytes,
                Due::In(std::time::Duration::from_millis(delay_ms)),
                priority,
            )
        };
        match pushed {
            Ok(h) => {
                // SAFETY: checked non-null; writable by the caller's contract.
                unsafe { *id = packed(JobId::of_push(h)) };
                XTCQ_OK
            }
            Err(e) => from_error(&e),
        }
    })
}

/// Copies `text` and a NUL into `buf` of `cap` bytes; `*len` is the text's length (without
/// the NUL). Too small: nothing copied, `*len` the bytes needed with the NUL.
///
/// # Safety
/// `buf` is valid for `cap` bytes (or NULL with `cap` 0); `len` writable.
unsafe fn give(text: &str, buf: *mut c_char, cap: usize, len: *mut usize) -> c_int {
    let need = text.len() + 1;
    if buf.is_null() || cap < need {
        // SAFETY: checked non-null by the callers; writable by the caller's contract.
        unsafe { *len = need };
        return fail(XTCQ_E_BUFFER_TOO_SMALL, format!("the answer needs {need} bytes, the buffer has {cap}"));
    }
    // SAFETY: `buf` holds at least `need` bytes (checked), and does not overlap `text`.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
        *len = text.len();
    }
    XTCQ_OK
}

/// The client, the optional queue name and the checks of both JSON calls, then `answer`.
///
/// # Safety
/// As `xtcq_stats_json`.
unsafe fn json_call(
    client: *const xtcq_client,
    queue: *const c_char,
    queue_required: bool,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
    answer: impl FnOnce(&::xtcq_client::Client, Option<&str>) -> Result<Value, ::xtcq_client::Error>,
) -> c_int {
    guarded(|| {
        if len.is_null() {
            return fail(XTCQ_E_INVALID, "len is NULL");
        }
        // SAFETY: the caller's contract.
        let c = match unsafe { shared(client, "client") } {
            Ok(c) => c,
            Err(code) => return code,
        };
        let q = if queue.is_null() && !queue_required {
            None
        } else {
            // SAFETY: the caller's contract.
            match unsafe { c_str(queue, "queue") } {
                Ok(q) => Some(q),
                Err(code) => return code,
            }
        };
        if let Err(code) = not_forked(c.born) {
            return code;
        }
        match answer(&c.inner, q) {
            // SAFETY: the caller's contract; `len` checked non-null.
            Ok(v) => unsafe { give(&v.to_string(), buf, cap, len) },
            Err(e) => from_error(&e),
        }
    })
}

/// Stores in `buf` (`cap` bytes, NUL-terminated) a JSON array with one object per queue
/// (`queue` NULL: all queues): its name, settings (`deques`, `capacity`, `max_attempts`,
/// `lease_ms`) and counters (`queued`, `running`, `delayed`, `dead`, `pushed`, `acked`,
/// `failed`, `dead_total`, `recovered`, `lease_expiries`, `sleepers`). `*len` is the text's
/// length; `XTCQ_E_BUFFER_TOO_SMALL` stores the bytes needed (with the NUL) instead.
///
/// # Safety
/// `client` is a live client; `queue` NULL or a NUL-terminated string; `buf` valid for `cap`
/// bytes (or NULL with `cap` 0); `len` writable.
#[no_mangle]
pub unsafe extern "C" fn xtcq_stats_json(
    client: *const xtcq_client,
    queue: *const c_char,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        json_call(client, queue, false, buf, cap, len, |c, q| {
            let s = c.stats(q)?;
            let rows: Vec<Value> = s
                .queues
                .iter()
                .map(|q| {
                    let m = &q.metrics;
                    json!({
                        "queue": q.info.name,
                        "deques": q.info.deques,
                        "capacity": q.info.capacity,
                        "max_attempts": q.info.max_attempts,
                        "lease_ms": q.info.lease_ms,
                        "queued": q.records.queued,
                        "running": q.records.claimed,
                        "delayed": q.records.delayed,
                        "dead": q.records.dead,
                        "pushed": m.pushed,
                        "acked": m.acked,
                        "failed": m.failed,
                        "dead_total": m.dead_total,
                        "recovered": m.recovered,
                        "lease_expiries": m.lease_expiries,
                        "sleepers": m.sleepers,
                    })
                })
                .collect();
            Ok(Value::Array(rows))
        })
    }
}

/// Stores in `buf` (`cap` bytes, NUL-terminated) a JSON array of the dead letters of
/// `queue`: `id` (as `xtcq_injector_push_id` gives it), `attempts`, `last_error` and
/// `payload_hex` (the payload in hex, cut to its first 8 KiB). Lengths as `xtcq_stats_json`.
///
/// # Safety
/// As `xtcq_stats_json`, with `queue` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xtcq_dead_json(
    client: *const xtcq_client,
    queue: *const c_char,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        json_call(client, queue, true, buf, cap, len, |c, q| {
            let letters = c.dead_letters(q.unwrap_or_default())?;
            let rows: Vec<Value> = letters
                .iter()
                .map(|d| {
                    let hex: String = d.payload.iter().map(|b| format!("{b:02x}")).collect();
                    json!({
                        "id": packed(d.id),
                        "attempts": d.attempts,
                        "last_error": d.last_error,
                        "payload_hex": hex,
                    })
                })
                .collect();
            Ok(Value::Array(rows))
        })
    }
}
