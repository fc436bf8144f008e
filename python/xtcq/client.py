"""Client, Owner, Injector, Thief and Job: thin objects over the C API's handles.

Rules:
- Each object owns one C handle and frees it when garbage-collected or closed; an object
  inherited across fork() raises Forked on use and frees nothing of the parent's.
- Long waits are taken in 100 ms steps in Python, so Ctrl-C (KeyboardInterrupt) is seen
  between them; each step releases the GIL.
- A Job used as a context manager is acked when the block ends normally and nacked (with
  the exception as its reason) when it raises.
"""

import ctypes
import time

from . import _lib
from .errors import InvalidArgument, XtcqError, check

_c = _lib.lib
_STEP_MS = 100


def _text(value, what):
    """A str argument as C wants it: no NUL inside (C would cut the string there)."""
    if not isinstance(value, str):
        raise InvalidArgument(-1, "%s is a str, not %s" % (what, type(value).__name__))
    if "\0" in value:
        raise InvalidArgument(-1, "%s contains a NUL character: %r" % (what, value))
    return value.encode()


def _name(value):
    return _text(value, "a queue name")


def _u32(value, what):
    """An unsigned 32-bit argument, checked (ctypes would wrap it silently)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFFFFFF:
        raise InvalidArgument(-1, "%s must be an int from 0 to 4294967295, not %r" % (what, value))
    return value


def _bytes(payload):
    if isinstance(payload, str):
        return payload.encode()
    if isinstance(payload, int):  # bytes(5) would be five zero bytes
        raise InvalidArgument(-1, "a payload is bytes or str, not int")
    return bytes(payload)



def _delay_ms(seconds):
    """A delay in whole milliseconds, refused when negative or not a number."""
    if not isinstance(seconds, (int, float)) or not 0 <= seconds * 1000 < 2**64:
        raise InvalidArgument(-1, "a delay is seconds from 0 up, not %r" % (seconds,))
    return int(seconds * 1000)

class _Handle:
    _free = None

    def __init__(self, ptr):
        self._ptr = ptr

    def _live(self):
        if not self._ptr:
            raise InvalidArgument(-1, "%s is closed" % type(self).__name__)
        return self._ptr

    def close(self):
        """Frees the handle now (also done when the object is collected)."""
        ptr, self._ptr = self._ptr, None
        if ptr:
            type(self)._free(ptr)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Client(_Handle):
    """A connection to xtcqd: `socket` None means $XTCQ_SOCKET, else the default path.
    Connect in each process, after fork(). Thread-safe."""

    _free = staticmethod(_c.xtcq_client_free)

    def __init__(self, socket=None):
        out = ctypes.c_void_p()
        path = None if socket is None else _text(str(socket), "the socket path")
        check(_c.xtcq_connect(path, ctypes.byref(out)))
        super().__init__(out.value)

    def create_queue(self, name, deques=0, capacity=0, max_attempts=0, lease_ms=0, fifo=False, exist_ok=False):
        """Creates a queue (0: the defaults of 4 deques of 1024 jobs, no attempt limit, no lease)."""
        flags = (_lib.XTCQ_EXIST_OK if exist_ok else 0) | (_lib.XTCQ_FIFO if fifo else 0)
        sizes = [_u32(v, k) for k, v in (("deques", deques), ("capacity", capacity),
                                         ("max_attempts", max_attempts), ("lease_ms", lease_ms))]
        check(_c.xtcq_create_queue(self._live(), _name(name), *sizes, flags))

    def delete_queue(self, name, force=False):
        """Deletes a queue. Refused (InUse) while a process is attached to it, force or not
        (a process stays attached until it exits); without `force` also while it holds jobs."""
        check(_c.xtcq_delete_queue(self._live(), _name(name), int(force)))

    def check(self, quiescent=False):
        """The segment's problems as a list of one message (empty: consistent)."""
        problems = ctypes.c_uint32()
        check(_c.xtcq_check(self._live(), int(quiescent), ctypes.byref(problems)))
        return [] if problems.value == 0 else [(_c.xtcq_last_error() or b"").decode()]

    def owner(self, queue):
        """Takes a free deque of `queue` as its owner (a producer)."""
        return Owner(self, queue)

    def injector(self, queue):
        """A producer without a deque: pushes go to the queue's overflow ring."""
        return Injector(self, queue)

    def thief(self, queue):
        """A consumer of `queue`."""
        return Thief(self, queue)


def _attach(fn, client, queue):
    out = ctypes.c_void_p()
    check(fn(client._live(), _name(queue), ctypes.byref(out)))
    return out.value


class Owner(_Handle):
    """Owns one deque of a queue. One thread at a time."""

    _free = staticmethod(_c.xtcq_owner_free)

    def __init__(self, client, queue):
        super().__init__(_attach(_c.xtcq_owner_attach, client, queue))
        self.queue = queue

    def push(self, payload):
        """Queues a job (bytes or str). Raises Full when the deque and the ring are full."""
        data = _bytes(payload)
        check(_c.xtcq_owner_push(self._live(), data, len(data)))

    def push_batch(self, payloads):
        """Queues every payload of `payloads` (a sequence of bytes or str) in order, up to 128
        at a time with one store in the deque; what the deque has no room for goes to the
        overflow ring. Returns how many were queued (all of them). A bad payload (an int, too
        large) raises before any is queued. A failure part-way (Full) raises with `.queued`:
        the first `.queued` payloads were queued, the rest were not."""
        if isinstance(payloads, (str, bytes, bytearray, memoryview)):
            raise InvalidArgument(-1, "payloads is a sequence of payloads, not one %s" % type(payloads).__name__)
        datas = [_bytes(p) for p in payloads]
        n = len(datas)
        ptrs = (ctypes.c_char_p * n)(*datas)
        lens = (ctypes.c_size_t * n)(*[len(d) for d in datas])
        queued = ctypes.c_size_t(0)
        rc = _c.xtcq_owner_push_batch(self._live(), ptrs, lens, n, ctypes.byref(queued))
        try:
            check(rc)
        except XtcqError as e:
            e.queued = queued.value
            raise
        return queued.value

    def pop(self):
        """The owner's next job, or None."""
        job = Job()
        return job._claimed(lambda: check(_c.xtcq_owner_pop(self._live(), job._live())))


class Injector(_Handle):
    """Pushes onto a queue's overflow ring. One thread at a time."""

    _free = staticmethod(_c.xtcq_injector_free)

    def __init__(self, client, queue):
        super().__init__(_attach(_c.xtcq_injector_attach, client, queue))
        self.queue = queue

    def push(self, payload):
        """Queues a job (bytes or str). Raises Full when the ring is full."""
        data = _bytes(payload)
        check(_c.xtcq_injector_push(self._live(), data, len(data)))

    def push_delayed(self, payload, seconds):
        """Queues a job that no consumer sees for `seconds` (the daemon puts it in line then)."""
        data = _bytes(payload)
        check(_c.xtcq_injector_push_delayed(self._live(), data, len(data), _delay_ms(seconds)))


class Thief(_Handle):
    """A consumer of one queue. Thread-safe: several threads may steal through one Thief."""

    _free = staticmethod(_c.xtcq_thief_free)

    def __init__(self, client, queue):
        super().__init__(_attach(_c.xtcq_thief_attach, client, queue))
        self.queue = queue

    def steal(self, timeout=0):
        """One job, or None. `timeout`: seconds to wait for one (None: no limit, 0: none)."""
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
            raise InvalidArgument(-1, "timeout is seconds >= 0 or None, not %r" % (timeout,))
        job = Job()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left_ms = _STEP_MS if deadline is None else int(max(0.0, deadline - time.monotonic()) * 1000)
            step = min(left_ms, _STEP_MS)
            got = job._claimed(lambda: check(_c.xtcq_thief_steal_wait(self._live(), job._live(), step)))
            if got is not None:
                return got
            if deadline is not None and time.monotonic() >= deadline:
                return None


    def steal_batch(self, n):
        """Up to `n` jobs (1 to 128) taken with one steal, each claimed by its own record's
        CAS: a list of Jobs, empty when there was none. Each is settled on its own."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= _lib.XTCQ_MAX_BATCH:
            raise InvalidArgument(-1, "n is 1 to %d, not %r" % (_lib.XTCQ_MAX_BATCH, n))
        jobs = [Job() for _ in range(n)]
        handles = (ctypes.c_void_p * n)(*[j._live() for j in jobs])
        count = ctypes.c_size_t(0)
        try:
            check(_c.xtcq_thief_steal_batch(self._live(), handles, n, ctypes.byref(count)))
        except BaseException:
            # As in Job._claimed: an interrupt after the claims gives the jobs back unrun.
            for j in jobs:
                if j._ptr and _c.xtcq_job_held(j._ptr):
                    _c.xtcq_job_release(j._ptr)
            raise
        for j in jobs[count.value :]:
            j.close()
        return jobs[: count.value]


class Job(_Handle):
    """A claimed job: read `payload`, then ack(), nack(), fail(reason) or release().
    Collected without either, it is nacked. One thread at a time."""

    _free = staticmethod(_c.xtcq_job_free)

    def __init__(self):
        out = ctypes.c_void_p()
        check(_c.xtcq_job_new(ctypes.byref(out)))
        super().__init__(out.value)

    def _claimed(self, call):
        """Runs a pop or steal `call` into this handle: self when it claimed a job, else
        None. An exception after the claim (Ctrl-C) gives the job back unrun, without
        counting an attempt, instead of nacking it when the object is collected."""
        try:
            return self if call() == _lib.XTCQ_OK else None
        except BaseException:
            if self._ptr and _c.xtcq_job_held(self._ptr):
                _c.xtcq_job_release(self._ptr)
            raise

    @property
    def payload(self):
        """The job's bytes."""
        data = ctypes.POINTER(ctypes.c_char)()
        size = ctypes.c_size_t()
        check(_c.xtcq_job_payload(self._live(), ctypes.byref(data), ctypes.byref(size)))
        return ctypes.string_at(data, size.value)

    @property
    def info(self):
        """(record index, generation, attempts before this claim, lease deadline ns or 0)."""
        info = self._info()
        return (info.index, info.generation, info.attempts, info.lease_deadline_ns)

    def _info(self):
        info = _lib.JobInfo()
        check(_c.xtcq_job_get_info(self._live(), ctypes.byref(info)))
        return info

    @property
    def id(self):
        """The job's stable id, "index.birth", the same across its attempts (as xtcq work,
        xtcq dead and the daemon's logs print it)."""
        info = self._info()
        return "%d.%d" % (info.index, info.birth)

    @property
    def attempts(self):
        """Times the job was given back before this claim."""
        return self._info().attempts

    def ack(self):
        """Done. Raises NotHeld when the lease expired first (the result is not recorded)."""
        check(_c.xtcq_job_ack(self._live()))

    def nack(self):
        """Failed: re-queued with attempt + 1, or dead-lettered at the queue's limit."""
        check(_c.xtcq_job_nack(self._live()))

    def fail(self, reason):
        """Like nack(), keeping `reason` as the job's last error."""
        text = str(reason).replace("\0", " ")
        check(_c.xtcq_job_fail(self._live(), text.encode("utf-8", "replace")))

    def fail_after(self, seconds, reason=None):
        """Like fail() (or nack() without a reason), but retried after `seconds` at the earliest."""
        text = None if reason is None else str(reason).replace("\0", " ").encode("utf-8", "replace")
        check(_c.xtcq_job_fail_after(self._live(), text, _delay_ms(seconds)))

    def release(self):
        """Not run after all: re-queued without counting an attempt."""
        check(_c.xtcq_job_release(self._live()))

    def extend_lease(self, seconds):
        """Sets the lease to `seconds` from now (a heartbeat for a long job)."""
        if not isinstance(seconds, (int, float)) or not 0 <= seconds * 1000 <= 0xFFFFFFFF:
            raise InvalidArgument(-1, "a lease is seconds from 0 to 4294967, not %r" % (seconds,))
        check(_c.xtcq_job_extend_lease(self._live(), int(seconds * 1000)))

    def __exit__(self, kind, value, tb):
        try:
            if kind is None:
                self.ack()
            else:
                self.fail("%s: %s" % (kind.__name__, value))
        finally:
            self.close()
