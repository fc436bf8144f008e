//! Status codes, their text, and the calling thread's last error message.
//!
//! - Every entry point returns one of the `XTCQ_*` codes: 0 for success, [`XTCQ_EMPTY`] (a
//!   positive "nothing there / would block", like PostgreSQL's `SHM_MQ_WOULD_BLOCK`), and
//!   negative codes for errors.
//! - The full message of the last error (what was wrong and what to do) is kept per thread
//!   and read with `xtcq_last_error`; it is replaced by the next error on that thread only.
//! - Mapping a library error to a code is done here once, so each code means one thing.

use std::cell::RefCell;
use std::ffi::{c_char, c_int};

use ::xtcq_client::Error;

/// Success.
pub const XTCQ_OK: c_int = 0;
/// Nothing there: no job to steal or pop, or the wait timed out. Not an error.
pub const XTCQ_EMPTY: c_int = 1;
/// A null pointer, a string that is not UTF-8, or an out-of-range argument.
pub const XTCQ_E_INVALID: c_int = -1;
/// xtcqd is not reachable: not running, no permission on its socket, connection lost, or no
/// answer in time.
pub const XTCQ_E_UNREACHABLE: c_int = -2;
/// The daemon refused this process or request (uid, group), or the process listening at the
/// socket is run by a user this process does not trust (see `XTCQ_TRUST_UID`).
pub const XTCQ_E_UNAUTHORIZED: c_int = -3;
/// No such queue (or, from the `xtcq_batch_*` calls, no such batch of the queue).
pub const XTCQ_E_NO_SUCH_QUEUE: c_int = -4;
/// The queue already exists (create without `XTCQ_EXIST_OK`).
pub const XTCQ_E_EXISTS: c_int = -5;
/// The queue, its overflow ring or the segment's records are full; retry later.
pub const XTCQ_E_FULL: c_int = -6;
/// The payload is larger than the segment's records hold.
pub const XTCQ_E_TOO_LARGE: c_int = -7;
/// The job is no longer this process's: its lease expired, or it was recovered.
pub const XTCQ_E_NOT_HELD: c_int = -8;
/// The handle was inherited across `fork()`: connect again in the child.
pub const XTCQ_E_FORKED: c_int = -9;
/// The segment is corrupt, was replaced, truncated or removed, or this process's slot is no
/// longer its own.
pub const XTCQ_E_SEGMENT: c_int = -10;
/// No free deque, process slot or queue-table entry, or a per-user limit of the daemon
/// reached (the message names the flag that raises it).
pub const XTCQ_E_NO_ROOM: c_int = -11;
/// The caller's buffer is too small (the length needed was stored).
pub const XTCQ_E_BUFFER_TOO_SMALL: c_int = -12;
/// A bug inside libxtcq was caught before it could unwind into C; the handle may be used
/// no further.
pub const XTCQ_E_PANIC: c_int = -13;
/// Another error (the message says which).
pub const XTCQ_E_OTHER: c_int = -14;
/// A delete without force was refused: processes are attached to the queue, a job of it is
/// running, or it holds jobs.
pub const XTCQ_E_IN_USE: c_int = -15;
/// This process ran out of file descriptors or memory (`ulimit -n`, `RLIMIT_AS`): the
/// daemon and the segment may be fine. Close something or raise the limit, then retry.
pub const XTCQ_E_RESOURCE: c_int = -16;

/// Create with `XTCQ_EXIST_OK` found a queue of that name with other settings (flavor,
/// deques, capacity, max attempts, lease, allowed users); the message names each.
pub const XTCQ_E_MISMATCH: c_int = -17;

/// The job was cancelled (`xtcq cancel`) while this process held it: the daemon took it back;
/// its result is not recorded and there is nothing to settle.
pub const XTCQ_E_CANCELLED: c_int = -18;

/// A push with a key was refused: a live job of the queue (queued, delayed or running) holds
/// the key; its id is stored, and the message names it.
pub const XTCQ_E_DUPLICATE: c_int = -19;

/// A push with a key and `XTCQ_KEY_OR_EXISTING` pushed nothing: a live job of the queue holds
/// the key, and its id is stored. Not an error.
pub const XTCQ_EXISTING: c_int = 2;

/// Room for one message and its NUL; longer messages are cut at a character boundary.
const MESSAGE_BYTES: usize = 1024;

thread_local! {
    // A plain byte array with a const initialiser needs no destructor, so it stays usable
    // while the thread's other thread-locals are torn down (pthread key destructors, atexit
    // handlers on the main thread): an error reported there cannot abort.
    static LAST_ERROR: RefCell<[u8; MESSAGE_BYTES]> = const { RefCell::new([0; MESSAGE_BYTES]) };
}

/// Keeps `message` as this thread's last error and returns `code`.
pub(crate) fn fail(code: c_int, message: impl AsRef<str>) -> c_int {
    let text = message.as_ref();
    let mut end = text.len().min(MESSAGE_BYTES - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let _ = LAST_ERROR.try_with(|m| {
        if let Ok(mut buf) = m.try_borrow_mut() {
            for (dst, &b) in buf.iter_mut().zip(&text.as_bytes()[..end]) {
                *dst = if b == 0 { b' ' } else { b };
            }
            buf[end] = 0;
        }
    });
    code
}

/// The code for a library error (and keeps its message).
pub(crate) fn from_error(e: &Error) -> c_int {
    use ::xtcq_client::JobError;
    let code = match e {
        // Before the others: the same EMFILE reads as "unreachable" from a connect and as a
        // segment error from an attach, and neither is what is wrong.
        _ if e.is_out_of_resources() => XTCQ_E_RESOURCE,
        Error::Unauthorized(_) | Error::UntrustedDaemon { .. } => XTCQ_E_UNAUTHORIZED,
        _ if e.is_unreachable() => XTCQ_E_UNREACHABLE,
        // No code of its own: the message (xtcq_last_error) says which was missing.
        Error::NoSuchQueue(_) | Error::NoSuchBatch(_) => XTCQ_E_NO_SUCH_QUEUE,
        Error::QueueExists(_) => XTCQ_E_EXISTS,
        Error::QueueMismatch { .. } => XTCQ_E_MISMATCH,
        Error::QueueFull { .. } | Error::RecordsFull(_) => XTCQ_E_FULL,
        Error::PayloadTooLarge { .. } => XTCQ_E_TOO_LARGE,
        Error::Job(JobError::LeaseExpired { .. } | JobError::NotHeld { .. }) => XTCQ_E_NOT_HELD,
        Error::Job(JobError::Cancelled { .. }) => XTCQ_E_CANCELLED,
        Error::Job(JobError::Requeue { .. }) => XTCQ_E_FULL,
        Error::NoFreeDeque { .. }
        | Error::NoFreeSlot(_)
        | Error::QueueTableFull(_)
        | Error::NoRoom(_)
        | Error::LimitReached(_) => XTCQ_E_NO_ROOM,
        Error::Segment(_)
        | Error::Corrupt(_)
        | Error::SegmentReplaced { .. }
        | Error::SegmentLost { .. }
        | Error::SlotNotResumed { .. }
        | Error::Queue(_)
        | Error::Job(_) => XTCQ_E_SEGMENT,
        Error::BadRequest(_) | Error::BadQueueName(_) | Error::Lease(_) | Error::Priority { .. } => {
            XTCQ_E_INVALID
        }
        Error::QueueInUse { .. } | Error::QueueNotEmpty { .. } => XTCQ_E_IN_USE,
        Error::Forked => XTCQ_E_FORKED,
        Error::DuplicateKey { .. } => XTCQ_E_DUPLICATE,
        // A full key table, or none (xtcqd --keys), or its entry locked too long.
        Error::KeyRefused(_) => XTCQ_E_NO_ROOM,
        _ => XTCQ_E_OTHER,
    };
    fail(code, e.to_string())
}

/// A short, static description of a status code.
///
/// # Safety
/// None: any `status` is accepted, and the result is a static string that lives forever.
#[no_mangle]
pub extern "C" fn xtcq_strerror(status: c_int) -> *const c_char {
    let s: &'static [u8] = match status {
        XTCQ_OK => b"ok\0",
        XTCQ_EMPTY => b"empty: nothing there, or the wait timed out\0",
        XTCQ_E_INVALID => b"invalid argument\0",
        XTCQ_E_UNREACHABLE => b"xtcqd is not reachable\0",
        XTCQ_E_UNAUTHORIZED => b"not authorized\0",
        XTCQ_E_NO_SUCH_QUEUE => b"no such queue\0",
        XTCQ_E_EXISTS => b"queue already exists\0",
        XTCQ_E_FULL => b"full\0",
        XTCQ_E_TOO_LARGE => b"payload too large\0",
        XTCQ_E_NOT_HELD => b"job no longer held (lease expired or recovered)\0",
        XTCQ_E_FORKED => b"handle inherited across fork(); connect again in this process\0",
        XTCQ_E_SEGMENT => b"segment corrupt, replaced, or this process's slot was lost\0",
        XTCQ_E_NO_ROOM => b"no free deque, process slot or queue entry\0",
        XTCQ_E_BUFFER_TOO_SMALL => b"buffer too small\0",
        XTCQ_E_PANIC => b"internal error in libxtcq (caught)\0",
        XTCQ_E_OTHER => b"error\0",
        XTCQ_E_IN_USE => b"queue in use or not empty\0",
        XTCQ_E_RESOURCE => b"this process is out of file descriptors or memory\0",
        XTCQ_E_MISMATCH => b"queue exists with other settings\0",
        XTCQ_E_CANCELLED => b"job cancelled while held\0",
        XTCQ_E_DUPLICATE => b"a live job of the queue holds this key\0",
        XTCQ_EXISTING => b"existing: a live job holds the key, nothing pushed\0",
        _ => b"unknown status\0",
    };
    s.as_ptr().cast()
}

/// The message of the last error on the calling thread ("" if none): what was wrong and
/// what to do. Valid until the next failing call on this thread.
#[no_mangle]
pub extern "C" fn xtcq_last_error() -> *const c_char {
    LAST_ERROR.try_with(|m| m.as_ptr().cast::<c_char>().cast_const()).unwrap_or(c"".as_ptr())
}
