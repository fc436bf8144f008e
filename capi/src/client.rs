//! `xtcq_client`: a connection to xtcqd, and the queues made through it.
//!
//! - Thread-safe: one `xtcq_client` may be used from several threads at once.
//! - Handles attached through a client keep its connection open on their own: freeing the
//!   client while they live is allowed.

use std::ffi::{c_char, c_int};
use std::path::Path;

use ::xtcq_client::{Client, QueueParams};

use crate::entry::{arg, c_str, guarded};
use crate::fork;
use crate::status::{fail, from_error, XTCQ_E_FORKED, XTCQ_E_INVALID, XTCQ_OK};

/// A connection to xtcqd (opaque).
pub struct xtcq_client {
    pub(crate) inner: Client,
    pub(crate) born: u64,
}

/// Checks the fork generation of a handle made at `born`.
pub(crate) fn not_forked(born: u64) -> Result<(), c_int> {
    if fork::forked_since(born) {
        return Err(fail(
            XTCQ_E_FORKED,
            "this handle was made before fork(); a child must connect again (xtcq_connect)",
        ));
    }
    Ok(())
}

/// A live client made in this process, and a queue name, for a queue request.
///
/// # Safety
/// `client` is NULL or a live client; `name` NULL or a NUL-terminated string.
pub(crate) unsafe fn client_and_name<'a>(
    client: *mut xtcq_client,
    name: *const c_char,
) -> Result<(&'a mut xtcq_client, &'a str), c_int> {
    // SAFETY: the caller's contract.
    let c = unsafe { arg(client, "client") }?;
    // SAFETY: the caller's contract.
    let name = unsafe { c_str(name, "name") }?;
    not_forked(c.born)?;
    Ok((c, name))
}

/// Connects to xtcqd at `socket` (NULL: `$XTCQ_SOCKET`, else the default path) and stores a
/// new client in `*out`. Connect in each process that uses xtcq, after `fork()`.
///
/// # Safety
/// `socket` is NULL or a NUL-terminated string; `out` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn xtcq_connect(socket: *const c_char, out: *mut *mut xtcq_client) -> c_int {
    guarded(|| {
        if out.is_null() {
            return fail(XTCQ_E_INVALID, "out is NULL");
        }
        let path = if socket.is_null() {
            None
        } else {
            // SAFETY: the caller's contract.
            match unsafe { c_str(socket, "socket") } {
                Ok(s) => Some(Path::new(s)),
                Err(code) => return code,
            }
        };
        let born = fork::generation();
        match Client::connect(path) {
            Ok(inner) => {
                // SAFETY: `out` is non-null and writable (the caller's contract).
                unsafe { *out = Box::into_raw(Box::new(xtcq_client { inner, born })) };
                XTCQ_OK
            }
            Err(e) => from_error(&e),
        }
    })
}

/// Frees a client (NULL is ignored). In a forked child it only forgets the parent's copy.
///
/// # Safety
/// `client` is NULL or came from `xtcq_connect` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn xtcq_client_free(client: *mut xtcq_client) {
    guarded(|| {
        if !client.is_null() {
            // SAFETY: made by Box::into_raw in xtcq_connect, freed once (the contract).
            let c = unsafe { Box::from_raw(client) };
            if fork::forked_since(c.born) {
                std::mem::forget(c);
            }
        }
        XTCQ_OK
    });
}

/// `flags` bit for [`xtcq_create_queue`]: an existing queue of that name with the same
/// settings is success; one with other settings is [`XTCQ_E_MISMATCH`].
pub const XTCQ_EXIST_OK: u32 = 1;
/// `flags` bit for [`xtcq_create_queue`]: owners pop their oldest job first (FIFO) instead
/// of their newest (LIFO, the default).
pub const XTCQ_FIFO: u32 = 2;

/// Creates queue `name` with `deques` owners' deques of `capacity` jobs each (0: 4 and
/// 1024), dead-lettering after `max_attempts` runs (0: never) and re-queueing a claim held
/// longer than `lease_ms` (0: no lease). `flags`: [`XTCQ_EXIST_OK`], [`XTCQ_FIFO`].
///
/// # Safety
/// `client` is a live client; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xtcq_create_queue(
    client: *mut xtcq_client,
    name: *const c_char,
    deques: u32,
    capacity: u32,
    max_attempts: u32,
    lease_ms: u32,
    flags: u32,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (c, name) = match unsafe { client_and_name(client, name) } {
            Ok(v) => v,
            Err(code) => return code,
        };
        let Some(p) = params(name, deques, capacity, max_attempts, lease_ms, flags) else {
            return fail(
                XTCQ_E_INVALID,
                format!("unknown flags {flags:#x} (known: XTCQ_EXIST_OK, XTCQ_FIFO)"),
            );
        };
        let options =
            ::xtcq_client::CreateOptions { exist_ok: flags & XTCQ_EXIST_OK != 0, ..Default::default() };
        match c.inner.create_queue_with(&p, &options) {
            Ok(_) => XTCQ_OK,
            Err(e) => from_error(&e),
        }
    })
}

/// As [`xtcq_create_queue`], with `levels` priority levels (0 or 1: one; at most 8), each
/// with `deques` deques of the segment's deques per queue, and `aging` (0: none): every
/// `aging`-th job a consumer takes comes from the least urgent non-empty level. Push at a
/// level with `xtcq_owner_push_priority` or `xtcq_injector_push_priority`.
///
/// # Safety
/// As `xtcq_create_queue`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn xtcq_create_queue_levels(
    client: *mut xtcq_client,
    name: *const c_char,
    deques: u32,
    capacity: u32,
    max_attempts: u32,
    lease_ms: u32,
    flags: u32,
    levels: u32,
    aging: u32,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (c, name) = match unsafe { client_and_name(client, name) } {
            Ok(v) => v,
            Err(code) => return code,
        };
        let Some(mut p) = params(name, deques, capacity, max_attempts, lease_ms, flags) else {
            return fail(
                XTCQ_E_INVALID,
                format!("unknown flags {flags:#x} (known: XTCQ_EXIST_OK, XTCQ_FIFO)"),
            );
        };
        p.levels = levels.max(1);
        p.aging = aging;
        let options =
            ::xtcq_client::CreateOptions { exist_ok: flags & XTCQ_EXIST_OK != 0, ..Default::default() };
        match c.inner.create_queue_with(&p, &options) {
            Ok(_) => XTCQ_OK,
            Err(e) => from_error(&e),
        }
    })
}

/// The params `xtcq_create_queue` makes of its arguments; `None` for unknown flags.
fn params(
    name: &str,
    deques: u32,
    capacity: u32,
    max_attempts: u32,
    lease_ms: u32,
    flags: u32,
) -> Option<QueueParams> {
    if flags & !(XTCQ_EXIST_OK | XTCQ_FIFO) != 0 {
        return None;
    }
    let mut p = QueueParams::new(name);
    if deques != 0 {
        p.deques = deques;
    }
    if capacity != 0 {
        p.capacity = capacity;
    }
    p.max_attempts = max_attempts;
    p.lease_ms = lease_ms;
    if flags & XTCQ_FIFO != 0 {
        p.flavor = ::xtcq_client::Flavor::Fifo;
    }
    Some(p)
}

/// Deletes queue `name`. The daemon refuses (`XTCQ_E_IN_USE`, the message says why) while a
/// process is attached to it, with or without `force`: a process stays attached until it
/// exits (an owner also until its `xtcq_owner_free`), so stop the backends that used it
/// first. Without `force` it also refuses while the queue holds jobs or dead letters; with
/// `force` those are dropped.
///
/// # Safety
/// `client` is a live client; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xtcq_delete_queue(
    client: *mut xtcq_client,
    name: *const c_char,
    force: c_int,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (c, name) = match unsafe { client_and_name(client, name) } {
            Ok(v) => v,
            Err(code) => return code,
        };
        match c.inner.delete_queue(name, force != 0) {
            Ok(_) => XTCQ_OK,
            Err(e) => from_error(&e),
        }
    })
}

/// Pauses queue `name`: its consumers, in every process, take no job until it is resumed
/// (jobs being run finish; pushes are still taken and wake nobody). Kept across daemon
/// restarts. Only the queue's owner, root and the daemon's uid may (`XTCQ_E_UNAUTHORIZED`
/// otherwise). Stores in `*was_paused` (when not NULL) 1 if it was paused already, else 0.
///
/// # Safety
/// `client` is a live client; `name` a NUL-terminated string; `was_paused` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn xtcq_pause_queue(
    client: *mut xtcq_client,
    name: *const c_char,
    was_paused: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { set_paused(client, name, true, was_paused) }
}

/// Resumes queue `name` ([`xtcq_pause_queue`]), waking its sleeping consumers. Stores in
/// `*was_paused` (when not NULL) 1 if it was paused, else 0.
///
/// # Safety
/// As [`xtcq_pause_queue`].
#[no_mangle]
pub unsafe extern "C" fn xtcq_resume_queue(
    client: *mut xtcq_client,
    name: *const c_char,
    was_paused: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { set_paused(client, name, false, was_paused) }
}

/// # Safety
/// As [`xtcq_pause_queue`].
unsafe fn set_paused(client: *mut xtcq_client, name: *const c_char, paused: bool, was: *mut c_int) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (c, name) = match unsafe { client_and_name(client, name) } {
            Ok(v) => v,
            Err(code) => return code,
        };
        let r = if paused { c.inner.pause_queue(name) } else { c.inner.resume_queue(name) };
        match r {
            Ok(had) => {
                if !was.is_null() {
                    // SAFETY: not NULL, and writable by the caller's contract.
                    unsafe { *was = c_int::from(had) };
                }
                XTCQ_OK
            }
            Err(e) => from_error(&e),
        }
    })
}

/// Checks the segment's invariants (what `xtcq check` does) and stores the number of
/// problems found in `*problems` (0: consistent); `xtcq_last_error` then holds the first
/// problem. With `quiescent` non-zero the check also asserts that nothing is in flight.
///
/// # Safety
/// `client` is a live client; `problems` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn xtcq_check(client: *mut xtcq_client, quiescent: c_int, problems: *mut u32) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (c, out) = match unsafe { (arg(client, "client"), arg(problems, "problems")) } {
            (Ok(c), Ok(p)) => (c, p),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        if let Err(code) = not_forked(c.born) {
            return code;
        }
        match c.inner.check(quiescent != 0) {
            Ok(report) => {
                *out = u32::try_from(report.problems.len()).unwrap_or(u32::MAX);
                if let Some(first) = report.problems.first() {
                    fail(XTCQ_OK, first.clone());
                }
                XTCQ_OK
            }
            Err(e) => from_error(&e),
        }
    })
}
